"""Metrics of the auto-recovery daemon (``walog autorecovery --metrics-listen``).

Gauges describe the last pass (what an alert on under-replicated ledgers needs: how many
ledgers still name an unavailable bookie); counters add up what every pass did.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from walog.autorecovery.replicate import Report
from walog.metrics.histogram import LoopHistogram, histogram_family


class AutorecoveryMetrics(Collector):
    """Counts auto-recovery passes; a prometheus_client collector (scraped on any thread)."""

    def __init__(self) -> None:
        self.passes = 0
        self.pass_duration = LoopHistogram()
        self.repaired_fragments = 0
        self.refilled_fragments = 0
        self.last: Report | None = None
        """The last pass's report (None before the first pass ends)."""
        self.last_end = 0.0
        """Unix time the last pass ended."""

    def record(self, report: Report, seconds: float, end: float) -> None:
        """Count one pass that took ``seconds`` and ended at Unix time ``end``."""
        self.passes += 1
        self.pass_duration.observe(seconds)
        self.repaired_fragments += len(report.repaired)
        self.refilled_fragments += len(report.refilled)
        self.last = report
        self.last_end = end

    def collect(self) -> Iterator[Metric]:
        """The metric families of this scrape (called by prometheus_client)."""
        last = self.last
        if last is not None:
            gauges = [
                (
                    "walog_autorecovery_underreplicated_ledgers",
                    "Ledgers naming an unavailable bookie in the last pass",
                    len(last.under_replicated),
                ),
                (
                    "walog_autorecovery_missing_bookies",
                    "Bookies named by ledgers but unavailable, in the last pass",
                    len(last.missing),
                ),
                (
                    "walog_autorecovery_unrepairable_fragments",
                    "Fragments (or ledgers) the last pass could not repair",
                    len(last.unrepairable),
                ),
                (
                    "walog_autorecovery_left_to_writers_fragments",
                    "Last fragments of open ledgers naming a lost bookie, left to their writers",
                    len(last.left_to_writers),
                ),
                (
                    "walog_autorecovery_last_pass_end_time_seconds",
                    "Unix time the last pass ended",
                    self.last_end,
                ),
            ]
            for name, documentation, value in gauges:
                gauge = GaugeMetricFamily(name, documentation)
                gauge.add_metric([], float(value))
                yield gauge
        counters = [
            ("walog_autorecovery_passes", "Passes over every ledger", self.passes),
            (
                "walog_autorecovery_repaired_fragments",
                "Fragments whose lost bookies were replaced by copies",
                self.repaired_fragments,
            ),
            (
                "walog_autorecovery_refilled_fragments",
                "Shares copied back to a bookie that lacked entries",
                self.refilled_fragments,
            ),
        ]
        for name, documentation, value in counters:
            counter = CounterMetricFamily(name, documentation)
            counter.add_metric([], float(value))
            yield counter
        yield histogram_family(
            "walog_autorecovery_pass_duration_seconds",
            "Time one pass over every ledger took",
            [({}, self.pass_duration)],
        )


__all__ = ["AutorecoveryMetrics"]

"""Metrics of the auto-recovery daemon (``walog autorecovery --metrics-listen``).

Several daemons may run; one of them, the elected auditor, passes over every ledger and
publishes those that need repair, and every daemon repairs some. The gauges therefore
describe this daemon's last audit, and only while it is fresh (the daemon still audits):
a daemon that lost the auditor's role stops exporting them instead of repeating an old
count, so an alert on under-replicated ledgers reads the current auditor. Counters add up
what this daemon's passes and repairs did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from walog.autorecovery.report import Report
from walog.metrics.histogram import LoopHistogram, histogram_family


class AutorecoveryMetrics(Collector):
    """Counts auto-recovery passes; a prometheus_client collector (scraped on any thread).

    Args:
        audit_fresh_s: how long after an audit its figures are still exported (a few audit
            intervals).
        clock: Unix time (for tests).
    """

    def __init__(
        self, audit_fresh_s: float = 180.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._fresh_s = audit_fresh_s
        self._clock = clock
        self.passes = 0
        self.pass_duration = LoopHistogram()
        self.repaired_fragments = 0
        self.refilled_fragments = 0
        self.unrepairable = 0
        self.left_to_writers = 0
        self.last_audit: Report | None = None
        """This daemon's last audit (None before its first)."""
        self.last_audit_end = 0.0
        """Unix time the last audit ended."""

    def record(self, report: Report, seconds: float, end: float) -> None:
        """Count one pass (an audit, a repair or a check) that took ``seconds`` and ended at
        Unix time ``end``."""
        self.passes += 1
        self.pass_duration.observe(seconds)
        self.repaired_fragments += len(report.repaired)
        self.refilled_fragments += len(report.refilled)
        self.unrepairable += len(report.unrepairable)
        self.left_to_writers += len(report.left_to_writers)
        if report.audit:
            self.last_audit = report
            self.last_audit_end = end

    def collect(self) -> Iterator[Metric]:
        """The metric families of this scrape (called by prometheus_client)."""
        audit = self.last_audit
        if audit is not None and self._clock() - self.last_audit_end <= self._fresh_s:
            gauges = [
                (
                    "walog_autorecovery_underreplicated_ledgers",
                    "Ledgers naming an unavailable bookie, in this auditor's last audit",
                    len(audit.under_replicated),
                ),
                (
                    "walog_autorecovery_missing_bookies",
                    "Bookies named by ledgers but unavailable, in this auditor's last audit",
                    len(audit.missing),
                ),
                (
                    "walog_autorecovery_last_audit_end_time_seconds",
                    "Unix time this auditor's last audit ended",
                    self.last_audit_end,
                ),
            ]
            for name, documentation, value in gauges:
                gauge = GaugeMetricFamily(name, documentation)
                gauge.add_metric([], float(value))
                yield gauge
        counters = [
            ("walog_autorecovery_passes", "Audits, repairs and checks done", self.passes),
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
            (
                "walog_autorecovery_unrepairable_fragments",
                "Repairs of a fragment (or ledger) that failed, each attempt counted",
                self.unrepairable,
            ),
            (
                "walog_autorecovery_left_to_writers_fragments",
                "Last fragments of open ledgers naming a lost bookie, left to their writers, "
                "each time a pass met one",
                self.left_to_writers,
            ),
        ]
        for name, documentation, value in counters:
            counter = CounterMetricFamily(name, documentation)
            counter.add_metric([], float(value))
            yield counter
        yield histogram_family(
            "walog_autorecovery_pass_duration_seconds",
            "Time one audit, repair or check took",
            [({}, self.pass_duration)],
        )


__all__ = ["AutorecoveryMetrics"]

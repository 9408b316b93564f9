"""Metrics of ``walog maintain`` (``--metrics-listen``), per log.

Gauges describe each log as the last pass found it (its bytes, ledgers, oldest record's
age, what retention waits for, how far its archive lags); counters add up what the passes
did. A log deleted since is no longer exported.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from walog.log.health import LogHealth
from walog.maintenance.service import LogReport
from walog.metrics.histogram import LoopHistogram, histogram_family

_GAUGES: list[tuple[str, str, str]] = [
    ("walog_log_bytes", "Entry bytes of the log's closed ledgers of known size", "size_bytes"),
    ("walog_log_ledgers", "Ledgers in the log's list", "ledgers"),
    (
        "walog_log_unmeasured_ledgers",
        "Closed ledgers of the log whose size is not known yet",
        "unmeasured_ledgers",
    ),
    (
        "walog_log_oldest_record_age_seconds",
        "Seconds since the log's oldest ledger was created",
        "oldest_record_age_s",
    ),
    (
        "walog_log_archive_lag_ledgers",
        "Closed ledgers of the log not archived yet",
        "archive_lag_ledgers",
    ),
    (
        "walog_log_archive_lag_seconds",
        "Seconds since the oldest closed, not archived ledger of the log was closed",
        "archive_lag_s",
    ),
]


class MaintainMetrics(Collector):
    """Counts maintenance passes; a prometheus_client collector (scraped on any thread)."""

    def __init__(self) -> None:
        self.passes = 0
        self.pass_duration = LoopHistogram()
        self.health: dict[str, LogHealth] = {}
        """Each log's figures from the last pass that could read it."""
        self.deleted: dict[str, int] = {}
        self.orphans: dict[str, int] = {}
        self.archived: dict[str, int] = {}
        self.failures: dict[str, int] = {}

    def record(self, reports: Sequence[LogReport], seconds: float) -> None:
        """Count one pass that took ``seconds``."""
        self.passes += 1
        self.pass_duration.observe(seconds)
        names = {r.name for r in reports}
        self.health = {n: h for n, h in self.health.items() if n in names}
        for r in reports:
            if r.health is not None:
                self.health[r.name] = r.health
            self.deleted[r.name] = self.deleted.get(r.name, 0) + r.deleted
            self.orphans[r.name] = self.orphans.get(r.name, 0) + r.orphans
            self.archived[r.name] = self.archived.get(r.name, 0) + len(r.archived)
            self.failures[r.name] = self.failures.get(r.name, 0) + (r.error is not None)

    def collect(self) -> Iterator[Metric]:
        """The metric families of this scrape (called by prometheus_client)."""
        health = dict(self.health)
        for name, documentation, field in _GAUGES:
            gauge = GaugeMetricFamily(name, documentation, labels=["log"])
            for log, figures in sorted(health.items()):
                value = getattr(figures, field)
                if value is not None:
                    gauge.add_metric([log], float(value))
            yield gauge
        waiting = GaugeMetricFamily(
            "walog_log_retention_waiting",
            "1 for what keeps retention from deleting the log's oldest ledger (reason: none, "
            "due, writing, open, archive, cursor, snapshot, age, size, empty)",
            labels=["log", "reason"],
        )
        for log, figures in sorted(health.items()):
            waiting.add_metric([log, figures.retention_reason], 1.0)
        yield waiting
        counters = [
            ("walog_maintain_deleted_ledgers", "Ledgers retention deleted", self.deleted),
            ("walog_maintain_orphan_ledgers", "Leftover ledgers deleted", self.orphans),
            ("walog_maintain_archived_ledgers", "Ledgers archived", self.archived),
            ("walog_maintain_log_failures", "Passes that could not finish a log", self.failures),
        ]
        for name, documentation, values in counters:
            counter = CounterMetricFamily(name, documentation, labels=["log"])
            for log, value in sorted(dict(values).items()):
                counter.add_metric([log], float(value))
            yield counter
        passes = CounterMetricFamily("walog_maintain_passes", "Maintenance passes done")
        passes.add_metric([], float(self.passes))
        yield passes
        yield histogram_family(
            "walog_maintain_pass_duration_seconds",
            "Time one pass over every log took",
            [({}, self.pass_duration)],
        )


__all__ = ["MaintainMetrics"]

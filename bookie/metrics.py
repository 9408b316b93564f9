"""The bookie's Prometheus metrics: a prometheus_client collector over its own counters.

The service, the storage engine and the GC count into plain integers and histograms on
the event loop (nothing on the add path takes a lock); :class:`BookieCollector` reads
them when Prometheus scrapes, on the HTTP thread, and hands prometheus_client the metric
families. Every series carries ``bookie="HOST:PORT"``. Names follow Prometheus's
conventions: ``walog_bookie_`` prefix, base units (seconds, bytes), ``_total`` counters.
The full list is in docs/operations.md ("Monitoring").
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from walog.latency import StageLatencies
from walog.metrics.histogram import LATENCY_BOUNDS_S, LoopHistogram, histogram_family

SERVICE_COUNTERS = {
    "adds": "Entries the bookie was asked to add",
    "add_bytes": "Payload bytes of the entries the bookie was asked to add",
    "failed_adds": "Adds answered with an error status",
    "rejected_adds": "Adds refused by admission control (TOO_MANY_REQUESTS)",
    "bad_requests": "Requests refused as malformed",
    "forces": "Force (sync) requests",
    "reads": "Read requests",
    "read_entries": "Entries answered to read requests",
    "read_bytes": "Payload bytes of the entries answered to read requests",
    "long_polls": "Long-poll LAC reads",
    "lac_watches": "LAC watch streams opened",
    "fences": "Fence requests, fencing reads included",
    "entry_lists": "ListEntries requests (which entries of a ledger are held)",
    "add_streams": "Add streams opened",
}
"""Counters of ``bookie.server.admission.ServiceStats``: ``walog_bookie_<field>_total``."""

STORAGE_METRICS: dict[str, tuple[str, str, str]] = {
    "journal_syncs": ("counter", "walog_bookie_journal_syncs", "Journal fdatasync calls"),
    "journal_groups": ("counter", "walog_bookie_journal_groups", "Journal group commits"),
    "journal_bytes": (
        "counter",
        "walog_bookie_journal_written_bytes",
        "Bytes written to the journal",
    ),
    "entries_added": (
        "counter",
        "walog_bookie_stored_entries",
        "Entries stored (duplicates not counted)",
    ),
    "bytes_written": (
        "counter",
        "walog_bookie_stored_bytes",
        "Payload bytes of the entries stored",
    ),
    "duplicate_adds": ("counter", "walog_bookie_duplicate_adds", "Adds of entries already stored"),
    "checkpoints": ("counter", "walog_bookie_checkpoints", "Checkpoints of the write cache"),
    "entries_checkpointed": (
        "counter",
        "walog_bookie_checkpointed_entries",
        "Entries written to entry logs by checkpoints",
    ),
    "replayed_records": (
        "gauge",
        "walog_bookie_journal_replayed_records",
        "Journal records replayed at start",
    ),
    "replayed_bytes": (
        "gauge",
        "walog_bookie_journal_replayed_bytes",
        "Bytes of the journal records replayed at start, framing included",
    ),
    "replay_seconds": (
        "gauge",
        "walog_bookie_journal_replay_seconds",
        "Seconds the journal replay at start took (reading, checking and applying records)",
    ),
    "entry_logs_deleted": (
        "counter",
        "walog_bookie_entry_logs_deleted",
        "Entry logs deleted by the GC",
    ),
    "entry_logs_compacted": (
        "counter",
        "walog_bookie_entry_logs_compacted",
        "Entry logs compacted by the GC",
    ),
    "compaction_read_errors": (
        "counter",
        "walog_bookie_compaction_read_errors",
        "Compaction steps stopped by a failed read of the entry log (the log is kept and "
        "taken again by a later pass)",
    ),
    "damaged_reads": (
        "counter",
        "walog_bookie_damaged_reads",
        "Reads that met a damaged entry or index row",
    ),
}
"""``BookieStats`` fields: kind, metric name (``_total`` added to counters), help. Any other
numeric field is exported as the gauge ``walog_bookie_storage_<field>``."""

STAGE_METRICS = {
    "add": (
        "walog_bookie_add_latency_seconds",
        "Add batches on the bookie: frame read to answer queued",
    ),
    "journal_queue": (
        "walog_bookie_journal_queue_seconds",
        "Journal groups: queued until the journal thread starts them",
    ),
    "journal_write": ("walog_bookie_journal_write_seconds", "Journal groups: framing and write"),
    "journal_sync": ("walog_bookie_journal_fsync_seconds", "Journal groups: fdatasync"),
    "journal_callback": (
        "walog_bookie_journal_callback_seconds",
        "Journal groups: back on the event loop after the sync",
    ),
}
"""The add stages of ``walog.latency.StageLatencies`` as histograms."""

_BOUNDS_US = [round(bound * 1e6) for bound in LATENCY_BOUNDS_S]


class BookieSource(Protocol):
    """What the collector reads; the running bookie's parts (see bookie/main.py)."""

    @property
    def service_stats(self) -> object:
        """``ServiceStats`` of the gRPC and native service."""

    @property
    def storage_stats(self) -> object:
        """``BookieStats`` of the storage engine."""

    @property
    def latencies(self) -> StageLatencies:
        """Add stage latencies of the storage engine."""

    def histograms(self) -> dict[str, tuple[str, LoopHistogram]]:
        """Other histograms by metric name: ``(help, histogram)``."""

    def gauges(self) -> dict[str, tuple[str, float]]:
        """Other current values by metric name: ``(help, value)``."""

    def counters(self) -> dict[str, tuple[str, float]]:
        """Other counters by metric name without ``_total``: ``(help, value)``."""


class BookieCollector(Collector):
    """Turns a bookie's counters into Prometheus metric families at scrape time.

    Args:
        source: the running bookie's parts.
        bookie_id: the value of the ``bookie`` label.
        disks: directories whose file systems are reported, by their ``dir`` label.
        info: labels of the ``walog_bookie_info`` series (version, instance id).
    """

    def __init__(
        self,
        source: BookieSource,
        bookie_id: str,
        disks: dict[str, Path],
        info: dict[str, str],
    ) -> None:
        self._source = source
        self._bookie = bookie_id
        self._disks = disks
        self._info = info

    def collect(self) -> Iterator[Metric]:
        """The metric families of this scrape (called by prometheus_client)."""
        source = self._source
        yield from self._service_counters(source.service_stats)
        yield from self._storage(source.storage_stats)
        latencies = source.latencies
        for stage, (name, documentation) in STAGE_METRICS.items():
            yield self._stage_histogram(latencies, stage, name, documentation)
        for name, (documentation, histogram) in source.histograms().items():
            yield histogram_family(
                name, documentation, [({"bookie": self._bookie}, histogram)], ["bookie"]
            )
        for name, (documentation, value) in source.counters().items():
            yield self._counter(name, documentation, value)
        for name, (documentation, value) in source.gauges().items():
            yield self._gauge(name, documentation, value)
        yield from self._disk_gauges()
        info = GaugeMetricFamily(
            "walog_bookie_info",
            "Always 1; the labels name the bookie's version and instance id",
            labels=["bookie", *sorted(self._info)],
        )
        info.add_metric([self._bookie, *(self._info[k] for k in sorted(self._info))], 1)
        yield info

    def _counter(self, name: str, documentation: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, documentation, labels=["bookie"])
        family.add_metric([self._bookie], value)
        return family

    def _gauge(self, name: str, documentation: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=["bookie"])
        family.add_metric([self._bookie], value)
        return family

    def _service_counters(self, stats: object) -> Iterator[Metric]:
        for field in dataclasses.fields(stats):  # type: ignore[arg-type]
            documentation = SERVICE_COUNTERS.get(field.name, field.name.replace("_", " "))
            value = float(getattr(stats, field.name))
            yield self._counter(f"walog_bookie_{field.name}", documentation, value)

    def _storage(self, stats: object) -> Iterator[Metric]:
        values = dataclasses.asdict(stats)  # type: ignore[call-overload]
        for field, value in sorted(values.items()):
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            kind, name, documentation = STORAGE_METRICS.get(
                field, ("gauge", f"walog_bookie_storage_{field}", field.replace("_", " "))
            )
            if kind == "counter":
                yield self._counter(name, documentation, float(value))
            else:
                yield self._gauge(name, documentation, float(value))

    def _stage_histogram(
        self, latencies: StageLatencies, stage: str, name: str, documentation: str
    ) -> Metric:
        cumulative = latencies.cumulative(stage, _BOUNDS_US)
        buckets = [(repr(b), float(c)) for b, c in zip(LATENCY_BOUNDS_S, cumulative, strict=False)]
        buckets.append(("+Inf", float(cumulative[-1])))
        family = histogram_family(name, documentation, [], ["bookie"])
        family.add_metric([self._bookie], buckets, latencies.sums[stage])
        return family

    def _disk_gauges(self) -> Iterator[Metric]:
        free = GaugeMetricFamily(
            "walog_bookie_disk_free_bytes",
            "Bytes free on the file system of each bookie directory",
            labels=["bookie", "dir"],
        )
        total = GaugeMetricFamily(
            "walog_bookie_disk_total_bytes",
            "Size of the file system of each bookie directory",
            labels=["bookie", "dir"],
        )
        for label, path in sorted(self._disks.items()):
            try:
                usage = shutil.disk_usage(path)
            except OSError:
                continue  # a vanished disk shows as a missing series (and a failed journal)
            free.add_metric([self._bookie, label], usage.free)
            total.add_metric([self._bookie, label], usage.total)
        yield free
        yield total


__all__ = [
    "SERVICE_COUNTERS",
    "STAGE_METRICS",
    "STORAGE_METRICS",
    "BookieCollector",
    "BookieSource",
]

"""The bookie's collector: Prometheus naming conventions, every series labelled with the
bookie, counters exact, engine figures it does not know still exported."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bookie.metrics import BookieCollector
from walog.latency import StageLatencies
from walog.metrics.histogram import LoopHistogram


@dataclasses.dataclass
class _Service:
    adds: int = 1234567
    reads: int = 3


@dataclasses.dataclass
class _Storage:
    journal_syncs: int = 7
    replayed_records: int = 2
    new_engine_figure: int = 5


class _Source:
    def __init__(self) -> None:
        self.service_stats = _Service()
        self.storage_stats = _Storage()
        self.latencies = StageLatencies()
        self.reads = LoopHistogram()

    def histograms(self) -> dict[str, tuple[str, LoopHistogram]]:
        return {"walog_bookie_read_latency_seconds": ("reads", self.reads)}

    def gauges(self) -> dict[str, tuple[str, float]]:
        return {"walog_bookie_read_only": ("read-only", 1.0)}

    def counters(self) -> dict[str, tuple[str, float]]:
        return {"walog_bookie_gc_deleted_ledgers": ("gc", 4.0)}


def _scrape(tmp_path: Path) -> dict[str, float]:
    source = _Source()
    source.latencies.record("journal_sync", 200e-6)
    source.reads.observe(0.002)
    registry = CollectorRegistry()
    registry.register(
        BookieCollector(source, "h:1", {"data": tmp_path}, {"version": "9", "instance_id": "i"})
    )
    text = generate_latest(registry).decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("walog_bookie_"), family.name
        for sample in family.samples:
            assert sample.labels["bookie"] == "h:1", sample
            key = sample.name + "".join(
                f",{k}={v}" for k, v in sorted(sample.labels.items()) if k != "bookie"
            )
            samples[key] = sample.value
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
    return samples


def test_bookie_metrics_follow_prometheus_conventions_and_keep_counters_exact(
    tmp_path: Path,
) -> None:
    samples = _scrape(tmp_path)
    assert samples["walog_bookie_adds_total"] == 1234567
    assert samples["walog_bookie_journal_syncs_total"] == 7
    assert samples["walog_bookie_journal_replayed_records"] == 2
    assert samples["walog_bookie_gc_deleted_ledgers_total"] == 4
    assert samples["walog_bookie_read_only"] == 1
    assert samples["walog_bookie_journal_fsync_seconds_count"] == 1
    assert samples["walog_bookie_journal_fsync_seconds_bucket,le=0.000256"] == 1
    assert samples["walog_bookie_journal_fsync_seconds_bucket,le=0.000128"] == 0
    assert samples["walog_bookie_read_latency_seconds_bucket,le=+Inf"] == 1
    assert samples["walog_bookie_disk_total_bytes,dir=data"] > 0
    assert samples["walog_bookie_info,instance_id=i,version=9"] == 1


def test_engine_figures_the_collector_does_not_know_are_exported_as_gauges(
    tmp_path: Path,
) -> None:
    assert _scrape(tmp_path)["walog_bookie_storage_new_engine_figure"] == 5

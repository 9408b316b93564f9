"""The metrics of walog maintain: each log's figures from the last pass, counters summed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from walog.log.health import log_health
from walog.log.log_config import LogConfig
from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.maintenance.metrics import MaintainMetrics
from walog.maintenance.service import LogReport


def test_metrics_export_each_log_and_forget_a_deleted_one() -> None:
    meta = LogMetadata(
        ledgers=(
            LedgerInfo(7, "CLOSED", 3, ctime=0.0, closed_at=5.0, size_bytes=900),
            LedgerInfo(8, ctime=5.0),
        )
    )
    health = log_health("orders", meta, LogConfig(), 65.0)
    metrics = MaintainMetrics()
    registry = CollectorRegistry()
    registry.register(metrics)
    metrics.record(
        [LogReport("orders", deleted=2, health=health), LogReport("gone", error="x")], 0.5
    )
    text = generate_latest(registry).decode()
    assert 'walog_log_bytes{log="orders"} 900.0' in text
    assert 'walog_log_oldest_record_age_seconds{log="orders"} 65.0' in text
    assert 'walog_log_retention_waiting{log="orders",reason="none"} 1.0' in text
    assert 'walog_log_archive_lag_seconds{log="orders"} 60.0' in text
    assert 'walog_maintain_deleted_ledgers_total{log="orders"} 2.0' in text
    assert 'walog_maintain_log_failures_total{log="gone"} 1.0' in text
    metrics.record([], 0.1)
    assert 'walog_log_bytes{log="orders"}' not in generate_latest(registry).decode()

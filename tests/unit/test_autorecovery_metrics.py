"""Auto-recovery metrics: the under-replicated count comes from audits only, and only while
the audit is fresh; repairs of single ledgers add to the counters without touching it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from walog.autorecovery.metrics import AutorecoveryMetrics
from walog.autorecovery.report import Report


def _registry(metrics: AutorecoveryMetrics) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(metrics)
    return registry


def test_only_a_fresh_audit_sets_the_under_replicated_gauge() -> None:
    now = [1000.0]
    metrics = AutorecoveryMetrics(audit_fresh_s=60.0, clock=lambda: now[0])
    registry = _registry(metrics)
    gauge = "walog_autorecovery_underreplicated_ledgers"
    assert registry.get_sample_value(gauge) is None  # no audit yet: no figure
    metrics.record(Report(missing={"b:1"}, under_replicated={1, 2, 3}, audit=True), 0.1, 1000.0)
    # A worker's repair of one ledger is not a census of the cluster.
    metrics.record(Report(under_replicated={2}), 0.5, 1001.0)
    assert registry.get_sample_value(gauge) == 3
    assert registry.get_sample_value("walog_autorecovery_missing_bookies") == 1
    assert registry.get_sample_value("walog_autorecovery_passes_total") == 2
    now[0] = 1061.0  # the daemon stopped auditing (another one leads now)
    assert registry.get_sample_value(gauge) is None
    assert registry.get_sample_value("walog_autorecovery_passes_total") == 2

"""A real Prometheus scrapes a LocalCluster and a client, and sees what a workload did; the
shipped alert rules, loaded into it, raise WalogBookieDown for a killed bookie."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry

import walog.metrics
from tests.integration.bookies import REPO_ROOT
from tests.prometheus import PrometheusServer
from walog.testing import LocalCluster, free_port

ALERT_RULES = REPO_ROOT / "docs" / "ops" / "walog-alerts.yml"


@pytest.fixture
def scraped_cluster(
    tmp_path: Path,
) -> Iterator[tuple[LocalCluster, PrometheusServer, walog.metrics.ClientMetrics]]:
    registry = CollectorRegistry()
    metrics = walog.metrics.register(registry)
    client_port = free_port()
    server, thread = prometheus_client.start_http_server(
        client_port, addr="127.0.0.1", registry=registry
    )
    try:
        with LocalCluster(bookies=3, data_dir=tmp_path / "cluster", metrics=True) as cluster:
            targets = {
                "walog-bookie": [
                    cluster.metrics_url(b).removeprefix("http://") for b in cluster.bookie_ids
                ],
                "walog-client": [f"127.0.0.1:{client_port}"],
            }
            with PrometheusServer(targets, rule_files=[ALERT_RULES]) as prometheus:
                yield cluster, prometheus, metrics
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_prometheus_scrapes_the_counts_of_a_workload_from_bookies_and_client(
    scraped_cluster: tuple[LocalCluster, PrometheusServer, walog.metrics.ClientMetrics],
) -> None:
    cluster, prometheus, metrics = scraped_cluster
    prometheus.wait_for('sum(up{job="walog-bookie"})', {"": 3})
    with cluster.connect(metrics=metrics) as client:
        with client.create_ledger(3, 3, 2) as writer:
            for _ in range(100):
                writer.append(b"z" * 100)
        with client.open_ledger(writer.ledger_id) as reader:
            assert len(reader.read(0, 99)) == 100
    # Wait for a scrape after the workload, then every figure must match it exactly.
    prometheus.wait_for("sum(walog_client_read_entries_total)", {"": 100})
    prometheus.wait_for("sum(walog_bookie_adds_total)", {"": 300})  # E = Qw = 3
    assert prometheus.values("sum(walog_client_added_entries_total)") == {"": 100}
    assert prometheus.values("sum(walog_client_added_bytes_total)") == {"": 100 * 100}
    assert prometheus.values("sum(walog_client_add_latency_seconds_count)") == {"": 100}
    per_bookie = prometheus.values("sum by (bookie) (walog_bookie_stored_entries_total)")
    assert per_bookie == {f"bookie={b}": 100 for b in cluster.bookie_ids}
    assert prometheus.values("count(walog_bookie_info)") == {"": 3}
    assert prometheus.values("max(walog_bookie_read_only)") == {"": 0}
    # Journal syncs counted by the counter and by the fsync histogram alike (one expression,
    # so both come from the same scrape of each bookie).
    difference = "sum(walog_bookie_journal_syncs_total - walog_bookie_journal_fsync_seconds_count)"
    assert prometheus.values(difference) == {"": 0}
    assert prometheus.values("sum(walog_bookie_journal_syncs_total)")[""] >= 1


def test_a_killed_bookie_raises_the_bookie_down_alert(
    scraped_cluster: tuple[LocalCluster, PrometheusServer, walog.metrics.ClientMetrics],
) -> None:
    cluster, prometheus, _ = scraped_cluster
    prometheus.wait_for('sum(up{job="walog-bookie"})', {"": 3})
    victim = cluster.metrics_url(1).removeprefix("http://")
    cluster.kill(1)
    # The rule waits a minute before firing; pending shows it took the bookie for down.
    expected = {
        f"alertname=WalogBookieDown,alertstate=pending,instance={victim},"
        "job=walog-bookie,severity=page": 1.0
    }
    prometheus.wait_for('ALERTS{alertname="WalogBookieDown"}', expected)
    assert prometheus.values('ALERTS{alertname!="WalogBookieDown"}') == {}

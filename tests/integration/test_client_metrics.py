"""Client metrics are opt-in and count what the client did: appends end to end and per
bookie, reads, LAC waits, recoveries, bookie failures and the ensemble changes they cause."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry

import walog
import walog.metrics
from walog.testing import LocalCluster


@pytest.fixture(scope="module")
def four_bookies() -> Iterator[LocalCluster]:
    with LocalCluster(bookies=4) as cluster:
        yield cluster


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None, f"no sample {name}{labels}"
    return value


def test_client_metrics_count_appends_reads_lac_waits_and_recoveries(
    four_bookies: LocalCluster,
) -> None:
    registry = CollectorRegistry()
    metrics = walog.metrics.register(registry)
    with four_bookies.connect(metrics=metrics) as client:
        writer = client.create_ledger(3, 3, 2)
        for _ in range(40):
            writer.append(b"x" * 100)
        reader = client.open_ledger(writer.ledger_id, recovery=False)
        # A tailing wait that the next append ends.
        appended = threading.Timer(0.2, writer.append, args=(b"y" * 100,))
        appended.start()
        assert reader.wait_last_add_confirmed(39, timeout=30) == 40
        appended.join()
        assert len(reader.read(0, 40)) == 41
        reader.close()
        # The writer never closes: a recovering open fences and closes its ledger.
        recovered = client.open_ledger(writer.ledger_id)
        assert recovered.last_add_confirmed == 40
        recovered.close()
    assert _value(registry, "walog_client_add_latency_seconds_count") == 41
    assert _value(registry, "walog_client_added_entries_total") == 41
    assert _value(registry, "walog_client_added_bytes_total") == 41 * 100
    assert _value(registry, "walog_client_read_entries_total") == 41
    assert _value(registry, "walog_client_read_bytes_total") == 41 * 100
    assert _value(registry, "walog_client_lac_wait_seconds_count") == 1
    assert 0 <= _value(registry, "walog_client_lac_wait_seconds_sum") < 30
    assert _value(registry, "walog_client_recovery_duration_seconds_count") == 1
    for bookie in writer.metadata.last_ensemble:
        # Every bookie of the ensemble answered every append (frames: one or more each).
        assert _value(registry, "walog_client_bookie_add_latency_seconds_count", bookie=bookie) >= 1
    assert _value(registry, "walog_client_ensemble_changes_total") == 0


def test_a_killed_bookie_counts_one_bookie_error_and_one_ensemble_change(
    four_bookies: LocalCluster,
) -> None:
    registry = CollectorRegistry()
    metrics = walog.metrics.register(registry)
    with four_bookies.connect(metrics=metrics) as client, client.create_ledger(3, 3, 2) as writer:
        writer.append(b"before")
        victim = writer.metadata.last_ensemble[0]
        four_bookies.kill(victim)
        try:
            for _ in range(5):
                writer.append(b"after")
            assert victim not in writer.metadata.last_ensemble
        finally:
            four_bookies.restart(victim)
    assert _value(registry, "walog_client_bookie_errors_total", bookie=victim) == 1
    assert _value(registry, "walog_client_ensemble_changes_total") == 1
    assert _value(registry, "walog_client_added_entries_total") == 6


def test_client_metrics_are_opt_in_and_never_touch_the_default_registry(
    four_bookies: LocalCluster,
) -> None:
    with four_bookies.connect() as client, client.create_ledger(3, 3, 2) as writer:
        writer.append(b"uncounted")
    names = {metric.name for metric in prometheus_client.REGISTRY.collect()}
    assert not any(name.startswith("walog_") for name in names)
    registry = CollectorRegistry()
    walog.metrics.register(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        walog.metrics.register(registry)


def test_a_client_without_metrics_does_not_even_import_prometheus_client() -> None:
    code = (
        "import sys, walog, walog.aio, walog.client\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('prometheus_client'))\n"
        "print(loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

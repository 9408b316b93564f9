"""Every test that starts ZooKeeper carries the ``zk`` marker, so ``-m "not zk"`` runs
without Java; the marker is applied in tests/conftest.py, never by hand only."""

from __future__ import annotations

from tests.processes import run_python


def collected(marker: str) -> list[str]:
    out = run_python("-m", "pytest", "--collect-only", "-q", "-m", marker, "tests/integration")
    return [line for line in out.splitlines() if "::" in line]


def test_every_test_that_starts_zookeeper_is_marked_zk() -> None:
    marked = collected("zk")
    unmarked = collected("not zk")
    assert any(t.endswith("[zookeeper]") for t in marked)  # any_cluster's ZooKeeper run
    assert any("test_a_takeover_through_a_zookeeper_connection" in t for t in marked)
    assert not [t for t in unmarked if t.endswith("[zookeeper]")]
    assert any(t.endswith("[sqlite]") for t in unmarked)

"""Every test that starts ZooKeeper carries the ``zk`` marker, so ``-m "not zk"`` runs
without Java; the marker is applied in tests/conftest.py, never by hand only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def collected(marker: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marker, "tests/integration"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_every_test_that_starts_zookeeper_is_marked_zk() -> None:
    marked = collected("zk")
    unmarked = collected("not zk")
    assert any(t.endswith("[zookeeper]") for t in marked)  # any_cluster's ZooKeeper run
    assert any("test_a_takeover_through_a_zookeeper_connection" in t for t in marked)
    assert not [t for t in unmarked if t.endswith("[zookeeper]")]
    assert any(t.endswith("[sqlite]") for t in unmarked)

"""Test servers' ports: each pytest-xdist worker, and each test run beside another (./test
runs the bookie's pure-Python tests beside the main run), picks from a slice of its own."""

from __future__ import annotations

import pytest

from walog.testing import process


def _slice(monkeypatch: pytest.MonkeyPatch, worker: str, workers: int, **env: str) -> range:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    for name in ("WALOG_TEST_PORT_SLICES", "WALOG_TEST_PORT_SLICE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return process._port_range()


def _overlap(a: range, b: range) -> bool:
    return max(a.start, b.start) < min(a.stop, b.stop)


def test_the_workers_of_one_run_pick_ports_from_disjoint_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slices = [_slice(monkeypatch, f"gw{i}", 3) for i in range(3)]
    assert all(len(s) >= 500 for s in slices)
    assert not any(_overlap(a, b) for i, a in enumerate(slices) for b in slices[i + 1 :])


def test_a_run_beside_another_picks_ports_from_a_slice_neither_of_its_workers_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    main = [_slice(monkeypatch, f"gw{i}", 3, WALOG_TEST_PORT_SLICES="4") for i in range(3)]
    beside = _slice(monkeypatch, "gw0", 1, WALOG_TEST_PORT_SLICES="4", WALOG_TEST_PORT_SLICE="3")
    assert len(beside) >= 500
    assert not any(_overlap(beside, s) for s in main)
    assert not any(_overlap(a, b) for i, a in enumerate(main) for b in main[i + 1 :])

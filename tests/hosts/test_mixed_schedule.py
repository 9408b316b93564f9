"""The mixed nemesis's schedule (pure): a function of its seed, every kind of fault comes
up in a minute, and the bound holds at every moment."""

from __future__ import annotations

import pytest

from tests.hosts.nemesis.run import MixedConfig
from tests.hosts.nemesis.schedule import (
    FAULT_KINDS,
    MARGIN_S,
    MAX_FAULTS,
    MAX_FAULTY_BOOKIES,
    MAX_ZK_DOWN,
    Fault,
    Layout,
)


def _struck(fault: Fault, layout: Layout) -> tuple[set[str], int, set[str]]:
    """Bookies, ZooKeeper nodes (a count) and client hosts a fault takes."""
    if fault.kind == "isolate_rack":
        bookies = {b for b, rack in layout.bookies.items() if rack == fault.target}
        return bookies, 1, set()
    if fault.kind == "kill_zk_leader":
        return set(), 1, set()
    if fault.kind == "zk_quorum_loss":
        return set(), 2, set()
    if fault.kind == "isolate_client":
        return set(), 0, {fault.target}
    return {fault.target.split(">")[0]}, 0, set()


@pytest.mark.parametrize("seed", range(20))
def test_the_schedule_keeps_the_bound_and_strikes_with_every_kind(seed: int) -> None:
    config = MixedConfig(seed=seed, seconds=60.0)
    layout = config.layout()
    schedule = config.schedule()
    assert schedule == config.schedule()
    assert schedule != MixedConfig(seed=seed + 1000, seconds=60.0).schedule()
    assert {f.kind for f in schedule} >= set(FAULT_KINDS)
    (retiring,) = [f for f in schedule if f.kind == "decommission"]
    faults = [f for f in schedule if f.kind in FAULT_KINDS]
    for at in sorted({f.start for f in faults}):
        bookies: set[str] = set()
        zk_down, clients, running = 0, set(), 0
        for fault in faults:
            if fault.start <= at < fault.start + fault.duration + MARGIN_S:
                struck, zk, client = _struck(fault, layout)
                bookies |= struck - {retiring.target}
                zk_down += zk
                clients |= client
                running += fault.start <= at < fault.start + fault.duration
        assert len(bookies) <= MAX_FAULTY_BOOKIES, (at, bookies)
        assert zk_down <= MAX_ZK_DOWN and len(clients) <= 1 and running <= MAX_FAULTS, at
    assert not [f for f in faults if f.start >= retiring.start and retiring.target in f.target]

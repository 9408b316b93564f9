"""One pipelined writer on a client host keeps appending while, in turn, a bookie host is
isolated, a whole rack is isolated, the ZooKeeper leader is killed, ZooKeeper loses its
quorum and a one-way cut separates the writer from one bookie. After each fault every
acknowledged entry reads back from a client on another host, and no ensemble holds two
bookies of one rack while another rack had room (fragments made while a rack was cut off
are the only exception).

The tests of this module share one cluster and one writer and run in order; each heals
what it broke before the next starts. The isolation of one host and the loss of the
ZooKeeper leader are milder cases of a rack's isolation and of the quorum's loss: they run
with ``--slow``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.hosts.conftest import healthy
from tests.hosts.history import (
    Fragment,
    HostWriter,
    check_readable,
    fragments,
    rack_crowded,
    read_back,
)
from walog.testing.hosts import HostCluster

pytestmark = pytest.mark.timeout(240)

LOG = "across-hosts"
WRITER_HOST, READER_HOST = "c1", "c2"
FAULT_S = 5.0
"""How long each fault lasts: past the bookies' 4 s session timeout, so cut-off bookies'
registrations expire and come back after the heal."""
WRITER_SESSION_S = 15.0
"""The writer's ZooKeeper session outlasts a leader election on a busy machine (without
contact for a whole session timeout it would stop, presuming its session expired)."""
PROGRESS = 150
"""Appends acknowledged during a fault, and again after the heal, to count as going on."""


class Run:
    """The module's writer and what the tests learned so far."""

    def __init__(self, cluster: HostCluster, out: Path) -> None:
        self.cluster = cluster
        self.out = out
        self.writer = HostWriter(
            cluster, WRITER_HOST, LOG, out / "writer", session_timeout=WRITER_SESSION_S
        )
        self.exempt: set[Fragment] = set()
        self.before: set[Fragment] = set()
        """The fragments as the last fault began."""
        self.phases = 0

    def current_ensemble(self) -> tuple[str, ...]:
        """The ensemble the writer appends to now (of the newest fragment)."""
        newest = max(fragments(self.cluster, LOG))
        return newest[2]

    def through(self, fault: Callable[[], None], *, rack_cut: bool = False) -> set[Fragment]:
        """Fault, keep writing for FAULT_S, heal; then every ack reads back and the rack
        rule holds. The fragments made meanwhile."""
        before = self.before = fragments(self.cluster, LOG)
        started = time.monotonic()
        fault()
        try:
            self.writer.wait_for_more(PROGRESS, timeout=30)
            # The fault lasts FAULT_S whatever the writer's pace: a duration, not a wait.
            time.sleep(max(0.0, FAULT_S - (time.monotonic() - started)))
        finally:
            healthy(self.cluster)
        if rack_cut:
            self.exempt |= fragments(self.cluster, LOG) - before
        acks = self.writer.wait_for_more(PROGRESS, timeout=60)
        end = max(a.position for a in acks)
        # Later entries carry the writer's LAC past `end` to the bookies, where a
        # non-fencing reader on another host finds it.
        self.writer.wait_for_more(PROGRESS, timeout=60)
        self.phases += 1
        reads = read_back(self.cluster, READER_HOST, LOG, end, self.out / f"read-{self.phases}")
        assert not check_readable(acks, reads, end)
        after = fragments(self.cluster, LOG)
        assert not rack_crowded(self.cluster, after - self.exempt, after)
        return after - before


def _replaced(made: set[Fragment], bookie: str, before: set[Fragment]) -> bool:
    """True when the writer moved away from ``bookie`` during the fault: a fragment made
    meanwhile leaves it out, and is either a new fragment past entry 0, or took the place,
    at entry 0, of a fragment of ``before`` naming the bookie (a ledger whose first entry
    never reached it), or begins a ledger rolled to meanwhile."""
    named = {(ledger, first) for ledger, first, ensemble in before if bookie in ensemble}
    old_ledgers = {ledger for ledger, _, _ in before}
    return any(
        bookie not in ensemble
        and (first > 0 or (ledger, first) in named or ledger not in old_ledgers)
        for ledger, first, ensemble in made
    )


@pytest.fixture(scope="module")
def run(hosts: HostCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    state = Run(hosts, tmp_path_factory.mktemp("history"))
    state.writer.wait_for_more(PROGRESS, timeout=120)
    yield state
    if state.writer.proc.poll() is None:
        state.writer.proc.kill()
        state.writer.proc.wait()


@pytest.mark.slow
def test_acked_entries_read_back_after_a_bookie_host_is_isolated(run: Run) -> None:
    bookie = run.current_ensemble()[0]
    made = run.through(lambda: run.cluster.isolate(run.cluster.host_of(bookie)))
    assert _replaced(made, bookie, run.before), (bookie, sorted(made), sorted(run.before))


def test_acked_entries_read_back_after_a_whole_rack_is_isolated(run: Run) -> None:
    bookie = run.current_ensemble()[1]
    made = run.through(lambda: run.cluster.isolate_rack(run.cluster.racks[bookie]), rack_cut=True)
    assert _replaced(made, bookie, run.before), (bookie, sorted(made), sorted(run.before))


@pytest.mark.slow
def test_acked_entries_read_back_after_the_zookeeper_leader_is_killed(run: Run) -> None:
    killed: list[int] = []
    run.through(lambda: killed.append(run.cluster.kill_zk_leader()))
    assert run.cluster.zk_node(killed[0]).running  # healed: started again, in the quorum


def test_acked_entries_read_back_after_zookeeper_loses_its_quorum(run: Run) -> None:
    # Appends need no ZooKeeper: the writer goes on (PROGRESS acks during the fault).
    stopped: list[int] = []
    run.through(lambda: stopped.extend(run.cluster.stop_zk_quorum()))
    assert len(stopped) == 2
    assert all(run.cluster.zk_node(myid).running for myid in stopped)


def test_acked_entries_read_back_after_a_one_way_cut_from_the_writer_to_a_bookie(
    run: Run,
) -> None:
    bookie = run.current_ensemble()[2]
    made = run.through(lambda: run.cluster.cut_one_way(WRITER_HOST, run.cluster.host_of(bookie)))
    assert _replaced(made, bookie, run.before), (bookie, sorted(made), sorted(run.before))


def test_the_writer_stops_cleanly_and_the_whole_log_reads_back(run: Run) -> None:
    assert run.writer.stop() == 0, run.writer.tail()
    acks = run.writer.acks()
    end = max(a.position for a in acks)
    reads = read_back(run.cluster, READER_HOST, LOG, end, run.out / "read-final")
    assert not check_readable(acks, reads, end)
    assert {r.key for r in reads} == {a.key for a in acks}

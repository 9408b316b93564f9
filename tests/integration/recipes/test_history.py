"""Three kvstore processes (examples/kvstore, on the state-machine recipe) under a stream
of writes; the leader is SIGKILLed, SIGSTOPped and partitioned from ZooKeeper in turn while
snapshots are taken and the log truncated. Every acknowledged command must be applied
exactly once on every node, in the same order, and a node started from scratch after the
truncation must restore to the same state."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

import walog
from tests.integration.recipes.history import check_histories
from tests.integration.recipes.kvcluster import KVProcess, Writer
from walog.log.position import Position
from walog.testing import LocalCluster

FLAGS = {"snapshot_every": 25, "roll_every": 10}


def eventually(check: Callable[[], None], within: float = 60.0) -> None:
    """Retry an assertion until it holds (processes get there in their own time)."""
    for attempt in Retrying(
        stop=stop_after_delay(within),
        wait=wait_fixed(0.1),
        retry=retry_if_exception_type((AssertionError, OSError)),
        reraise=True,
    ):
        with attempt:
            check()


def leader_of(nodes: list[KVProcess]) -> KVProcess:
    """The node that leads now (waits for one)."""
    found: list[KVProcess] = []

    def one_leads() -> None:
        found[:] = [n for n in nodes if n.role() == "LEADER"]
        assert len(found) == 1, f"{len(found)} nodes lead"

    eventually(one_leads)
    return found[0]


def another_leads(nodes: list[KVProcess], old: KVProcess) -> None:
    eventually(lambda: assert_leads([n for n in nodes if n is not old]))


def assert_leads(nodes: list[KVProcess]) -> None:
    assert any(n.role() == "LEADER" for n in nodes), "no other node leads yet"


def kill_leader(nodes: list[KVProcess]) -> None:
    old = leader_of(nodes)
    old.kill()
    another_leads(nodes, old)
    old.start()  # a new incarnation: restores the newest snapshot, replays the rest


def pause_leader(nodes: list[KVProcess]) -> None:
    old = leader_of(nodes)
    old.signal(signal.SIGSTOP)
    another_leads(nodes, old)
    old.signal(signal.SIGCONT)  # wakes believing it leads: fenced on its next append


def partition_leader(nodes: list[KVProcess]) -> None:
    old = leader_of(nodes)
    old.proxy.partition()
    another_leads(nodes, old)
    old.proxy.heal()


def standby_through_truncation(
    zk_cluster: LocalCluster, log_name: str, nodes: list[KVProcess], writer: Writer
) -> tuple[KVProcess, int]:
    """Pause a standby until the log is truncated several ledgers past what it applied, then
    resume it: it must notice (its reader's DataLossError) and restore a newer snapshot.
    Returns the node and the length of its history when it was paused."""
    standby = next(n for n in nodes if n.role() == "STANDBY")
    standby.signal(signal.SIGSTOP)
    lines = standby.history.read_text().splitlines()
    last = lines[-1].split()
    applied = Position.parse(last[-1] if last[0] == "restored" else last[0])
    with walog.connect(zk_cluster.metadata_uri) as client:
        log = client.open_log(log_name)

        def truncated_past() -> None:
            gone = log.metadata().truncated_through
            # Three snapshots later: several whole ledgers after the paused one are gone.
            assert gone is not None and gone > applied, f"truncated through {gone}"

        eventually(truncated_past)
        writer.wait_more(3 * FLAGS["snapshot_every"])
    standby.signal(signal.SIGCONT)
    return standby, len(lines)


FAULTS = {"sigkill": kill_leader, "sigstop": pause_leader, "partition": partition_leader}


@pytest.fixture
def nodes(zk_cluster: LocalCluster, log_name: str, tmp_path: Path) -> Iterator[list[KVProcess]]:
    started: list[KVProcess] = []
    try:
        for name in "abc":
            started.append(
                KVProcess(
                    zk_cluster.metadata_uri, log_name, name, tmp_path / f"{name}.history", **FLAGS
                )
            )
        yield started
    finally:
        for node in started:
            node.close()


def histories(nodes: list[KVProcess]) -> dict[str, list[str]]:
    return {n.node_id: n.history.read_text().splitlines() for n in nodes}


def same_state(nodes: list[KVProcess]) -> str:
    """Wait until every node's map has the same hash (DIGEST's first word; the applied
    positions may differ in form: a standby's is the next entry, the leader's next slot)."""
    answers: list[str] = []

    def converged() -> None:
        answers[:] = [n.request("DIGEST").split()[0] for n in nodes]
        assert len(set(answers)) == 1, f"nodes differ: {answers}"

    eventually(converged)
    return answers[0]


def run_history(
    zk_cluster: LocalCluster,
    log_name: str,
    tmp_path: Path,
    nodes: list[KVProcess],
    rounds: int,
    writes_between: int,
) -> None:
    started = time.monotonic()
    with Writer(nodes) as writer:
        writer.wait_more(writes_between)
        for _ in range(rounds):
            for name, fault in FAULTS.items():
                begun = time.monotonic()
                fault(nodes)
                print(f"{name}: another leader after {time.monotonic() - begun:.1f}s")
                writer.wait_more(writes_between)
            begun = time.monotonic()
            lagging, paused_at = standby_through_truncation(zk_cluster, log_name, nodes, writer)
            print(f"standby paused through a truncation: {time.monotonic() - begun:.1f}s")
            writer.wait_more(writes_between)
        acked = writer.stop()
    digest = same_state(nodes)
    after_pause = lagging.history.read_text().splitlines()[paused_at:]
    assert any(line.startswith("restored") for line in after_pause), (
        f"{lagging.node_id} never restored a snapshot after the truncation"
    )
    with walog.connect(zk_cluster.metadata_uri) as client:
        meta = client.open_log(log_name).metadata()
    assert meta.snapshots, "no snapshot was taken"
    assert meta.truncated_through is not None, "the log was never truncated"
    assert meta.truncated_through <= meta.snapshots[0].position

    fresh = KVProcess(zk_cluster.metadata_uri, log_name, "d", tmp_path / "d.history", **FLAGS)
    nodes.append(fresh)
    assert same_state(nodes) == digest
    fresh_lines = fresh.history.read_text().splitlines()
    assert fresh_lines[:1] == ["started"] and fresh_lines[1].startswith("restored "), fresh_lines[
        :2
    ]

    every = histories(nodes)
    log = check_histories(every, acked.positions)
    assert len(acked.positions) >= writes_between * (1 + 3 * rounds)
    end = log[-1][0]
    for node, lines in every.items():  # every node applied the whole log
        last = lines[-1].split()
        reached = Position.parse(last[1]) > end if last[0] == "restored" else last[0] == str(end)
        assert reached, f"{node} stopped at {lines[-1]}, the log ends at {end}"
    print(
        f"history: {len(log)} records, {len(acked.positions)} acked, {writer.unknown} unknown,"
        f" {len(meta.snapshots)} snapshots, truncated through {meta.truncated_through},"
        f" {time.monotonic() - started:.1f}s"
    )


def test_every_acked_command_is_applied_once_everywhere_in_order_through_leader_faults(
    zk_cluster: LocalCluster, log_name: str, tmp_path: Path, nodes: list[KVProcess]
) -> None:
    run_history(zk_cluster, log_name, tmp_path, nodes, rounds=1, writes_between=30)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_history_holds_through_many_rounds_of_leader_faults(
    zk_cluster: LocalCluster, log_name: str, tmp_path: Path, nodes: list[KVProcess]
) -> None:
    run_history(zk_cluster, log_name, tmp_path, nodes, rounds=4, writes_between=150)

"""A writer cut off from ZooKeeper and from two bookies of its ensemble while a standby on
another host takes the log over: the old writer ends with WriterFencedError or a metadata
error, and never had a record acknowledged that the new leader's log does not hold (a
history check over every acknowledged record of both)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.checker import History, check
from tests.hosts.conftest import start_host_cluster
from tests.hosts.history import HostWriter, fragments, read_back
from walog.testing.hosts import HostCluster

pytestmark = pytest.mark.timeout(240)

LOG = "takeover"
OLD, STANDBY, READER = "c1", "c2", "c3"
CLEAR_ERRORS = ("WriterFencedError", "LedgerFencedError", "MetadataError", "SessionExpired")


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    """Its own cluster (c1 the old writer, c2 the standby, c3 reads)."""
    cluster = start_host_cluster(tmp_path_factory.mktemp("hosts"), clients=3)
    try:
        yield cluster
    finally:
        cluster.close()


def _last_event(writer: HostWriter) -> dict[str, str]:
    lines = [line for line in writer.tail().splitlines() if line.startswith("{")]
    event: dict[str, str] = json.loads(lines[-1])
    return event


def test_a_partitioned_writer_never_acks_what_the_standby_leader_lacks(
    split: HostCluster, tmp_path: Path
) -> None:
    old = HostWriter(split, OLD, LOG, tmp_path / "old", incarnation=0)
    old.wait_for_more(500, timeout=60)
    newest = max(fragments(split, LOG))
    cut_off = [split.host_of(b) for b in newest[2][:2]]
    for zk in ("zk1", "zk2", "zk3"):
        split.cut(OLD, zk)
    for host in cut_off:
        split.cut(OLD, host)
    standby = HostWriter(split, STANDBY, LOG, tmp_path / "standby", incarnation=1)
    try:
        standby.wait_for_more(500, timeout=60)
        exit_code = old.proc.wait(timeout=60)  # it gives up while still cut off
    finally:
        split.heal()
    event = _last_event(old)
    assert (exit_code, event["event"]) in ((0, "fenced"), (4, "failed")), old.tail()
    assert any(name in event.get("error", "") for name in CLEAR_ERRORS) or event["event"] == (
        "fenced"
    ), event
    standby.wait_for_more(300, timeout=60)
    assert standby.stop() == 0, standby.tail()
    acks = old.acks() + standby.acks()
    end = max(a.position for a in standby.acks())
    reads = read_back(split, READER, LOG, end, tmp_path / "read")
    violations = check(History(acks, {"reader": reads}, {**old.sent(), **standby.sent()}))
    assert not violations, "\n".join(map(str, violations))

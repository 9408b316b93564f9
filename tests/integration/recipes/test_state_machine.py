"""The state-machine recipe over real bookies, nodes in this process (each its own client
and metadata session): takeover, catch-up, exactly-once application, snapshots,
truncation by snapshot and restore."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import IO, Any, cast

import pytest

import walog.aio
from walog.aio import AsyncClient
from walog.errors import DataLossError, WriterFencedError
from walog.log.async_log import AsyncLog
from walog.log.log_metadata import LogMetadata
from walog.log.position import Position, Record
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.recipes import AsyncStateMachine, NotLeaderError, Role, SnapshotPolicy
from walog.recipes.keeper import SnapshotKeeper
from walog.recipes.snapshots import POSITION_TAG, SNAPSHOT_TAG
from walog.testing import LocalCluster
from walog.wire.durability import Durability


class Counter:
    """A service whose state shows every record applied, in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.restored_at: Position | None = None

    def apply(self, record: Record) -> int:
        self.seen.append(record.data.decode())
        return len(self.seen)

    def snapshot(self) -> bytes:
        return json.dumps(self.seen).encode()

    def restore(self, data: IO[bytes], position: Position) -> None:
        self.seen = json.loads(data.read())
        self.restored_at = position


@contextlib.asynccontextmanager
async def node(
    uri: str, log_name: str, node_id: str, service: Any, **kwargs: Any
) -> AsyncIterator[tuple[AsyncClient, AsyncStateMachine]]:
    async with await walog.aio.connect(uri) as client:
        log = await client.open_log(log_name, roll_policy=RollPolicy(max_entries=5))
        machine = AsyncStateMachine(log, service, node_id=node_id, **kwargs)
        await machine.start()
        try:
            yield client, machine
        finally:
            await machine.close()


def overwrite(path: str, data: bytes) -> None:
    Path(path).write_bytes(data)


def is_leader(machine: AsyncStateMachine) -> bool:
    return machine.role is Role.LEADER


@contextlib.asynccontextmanager
async def leader_and_standby(
    uri: str, log_name: str, a_state: Counter, b_state: Counter
) -> AsyncIterator[tuple[AsyncStateMachine, AsyncStateMachine]]:
    """Node ``a``, once it leads, and node ``b`` started beside it."""
    async with node(uri, log_name, "a", a_state) as (_, a):
        await a.wait_for(lambda: is_leader(a), 30)
        async with node(uri, log_name, "b", b_state) as (_, b):
            yield a, b


async def hand_over(
    a: AsyncStateMachine, b: AsyncStateMachine, a_state: Counter, b_state: Counter
) -> None:
    """``b`` catches up with ``a``, ``a`` resigns, and ``b`` leads."""
    await b.wait_for(lambda: b_state.seen == a_state.seen, 30)
    await a.close()
    await b.wait_for(lambda: is_leader(b), 30)


async def test_a_standby_applies_every_acknowledged_command_in_order_and_takes_over(
    cluster: LocalCluster, log_name: str
) -> None:
    uri = cluster.metadata_uri
    a_state, b_state = Counter(), Counter()
    async with leader_and_standby(uri, log_name, a_state, b_state) as (a, b):
        assert b.role is Role.STANDBY
        with pytest.raises(NotLeaderError):
            await b.submit(b"x")
        results = [await a.submit(b"c%d" % i) for i in range(20)]
        assert results == list(range(1, 21))
        await hand_over(a, b, a_state, b_state)  # a resigns: b takes over after catching up
        assert await b.submit(b"after") == 21
    assert b_state.seen == [*(f"c{i}" for i in range(20)), "after"]


async def test_a_state_machine_refuses_a_volatile_log(cluster: LocalCluster, log_name: str) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        log = await client.open_log(log_name, durability=Durability.VOLATILE)
        refused = rf"log '{re.escape(log_name)}' is VOLATILE: .*durability=Durability.PERSISTENT"
        with pytest.raises(ValueError, match=refused):
            AsyncStateMachine(log, Counter(), node_id="a")


async def test_a_new_node_restores_the_newest_snapshot_after_truncation(
    cluster: LocalCluster, log_name: str
) -> None:
    uri = cluster.metadata_uri
    policy = SnapshotPolicy(every_records=10, keep=2)
    leader_state = Counter()
    async with node(uri, log_name, "a", leader_state, snapshot_policy=policy) as (client, a):
        await a.wait_for(lambda: is_leader(a), 30)
        for i in range(60):
            await a.submit(b"c%d" % i)
        await a.snapshot_now()
        log = await client.open_log(log_name)
        meta = await log.metadata()
        assert len(meta.snapshots) == 2
        assert meta.truncated_through is not None
        assert meta.truncated_through <= meta.snapshots[0].position
        # Retention keeps what the oldest snapshot still needs.
        aggressive = await client.open_log(
            log_name, retention=RetentionPolicy(max_age=1e-9), override_config=True
        )
        await aggressive.enforce_retention()
        after = await log.metadata()
        assert after.truncated_through is not None
        assert after.truncated_through <= after.snapshots[0].position
        # Leftovers of nodes that crashed between writing and listing a snapshot: one
        # older than the newest listed (never listable: deleted), one newer (kept).
        leftovers = {}
        for name, position in (("old", Position(1, 0, 0)), ("new", Position(2**40, 0, 0))):
            writer = await client.create_ledger(
                3, 3, 2, custom_metadata={SNAPSHOT_TAG: log_name, POSITION_TAG: str(position)}
            )
            await writer.close()
            leftovers[name] = writer.ledger_id
        fresh = Counter()
        async with node(uri, log_name, "c", fresh) as (_, c):
            assert fresh.restored_at == meta.snapshots[-1].position
            ledgers = await client.list_ledgers()
            assert leftovers["old"] not in ledgers and leftovers["new"] in ledgers
            await a.submit(b"last")
            await c.wait_for(lambda: fresh.seen == leader_state.seen, 30)
    assert fresh.seen == [*(f"c{i}" for i in range(60)), "last"]


async def test_a_corrupt_newest_snapshot_is_skipped_for_the_one_before(
    cluster: LocalCluster, log_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = cluster.metadata_uri
    leader_state = Counter()
    where = tmp_path / "snapshots"
    async with node(uri, log_name, "a", leader_state, snapshot_dir=where) as (client, a):
        await a.wait_for(lambda: is_leader(a), 30)
        for i in range(12):
            await a.submit(b"c%d" % i)
            if i in (5, 11):
                await a.snapshot_now()
        meta = await (await client.open_log(log_name)).metadata()
        older, newest = meta.snapshots
        assert newest.path is not None
        overwrite(newest.path, b"garbage")
        fresh = Counter()
        with caplog.at_level(logging.WARNING, logger="walog.recipes.machine"):
            async with node(uri, log_name, "c", fresh, snapshot_dir=where) as (_, c):
                assert fresh.restored_at == older.position
                await c.wait_for(lambda: fresh.seen == leader_state.seen, 30)
    skipped = [r for r in caplog.records if "skipping corrupt snapshot" in r.getMessage()]
    assert len(skipped) == 1
    assert str(newest.position) in skipped[0].getMessage()


class StaleListOnce:
    """A log whose first ``metadata()`` answer is read before ``meanwhile`` runs: the
    snapshot list a restoring node holds is already out of date when it reads a snapshot."""

    def __init__(self, log: AsyncLog, meanwhile: Callable[[], Awaitable[object]]) -> None:
        self._log = log
        self._meanwhile: Callable[[], Awaitable[object]] | None = meanwhile

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def metadata(self) -> LogMetadata:
        meta = await self._log.metadata()
        if self._meanwhile is not None:
            meanwhile, self._meanwhile = self._meanwhile, None
            await meanwhile()
        return meta


async def test_a_snapshot_dropped_during_a_restore_gives_way_to_the_newer_one(
    cluster: LocalCluster, log_name: str
) -> None:
    uri = cluster.metadata_uri
    policy = SnapshotPolicy(keep=1)
    leader_state = Counter()
    async with node(uri, log_name, "a", leader_state, snapshot_policy=policy) as (client, a):
        await a.wait_for(lambda: is_leader(a), 30)
        await a.submit(b"c0")
        first = await a.snapshot_now()
        await a.submit(b"c1")

        async def newer_snapshot_drops_the_first() -> None:
            assert await a.snapshot_now() is not None

        log = StaleListOnce(await client.open_log(log_name), newer_snapshot_drops_the_first)
        fresh = Counter()
        keeper = SnapshotKeeper(cast(AsyncLog, log), fresh, "c", policy, None)
        restored = await keeper.restore_newest(None)
    assert first is not None and restored is not None and restored > first.position
    assert fresh.seen == ["c0", "c1"]


class TruncatedBeforeOpens:
    """A log whose first ``times`` ``open_reader`` calls run ``meanwhile`` first: the
    position a restoring node opens at has been truncated away each time."""

    def __init__(self, log: AsyncLog, meanwhile: Callable[[], Awaitable[object]], times: int):
        self._log = log
        self._meanwhile = meanwhile
        self.times = times
        self.ran = 0  # meanwhile runs finished

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def open_reader(self, *args: Any, **kwargs: Any) -> Any:
        if self.times > 0:
            self.times -= 1
            await self._meanwhile()
            self.ran += 1
        return await self._log.open_reader(*args, **kwargs)


async def test_a_standby_whose_snapshots_are_truncated_away_twice_restores_the_newest(
    cluster: LocalCluster, log_name: str
) -> None:
    uri = cluster.metadata_uri
    policy = SnapshotPolicy(keep=1)
    a_state, b_state = Counter(), Counter()
    async with node(uri, log_name, "a", a_state, snapshot_policy=policy) as (client, a):
        await a.wait_for(lambda: is_leader(a), 30)
        sent = 0

        async def snapshot_and_truncate_past_it() -> None:
            # Commands enough to fill a ledger (5 entries each), then a snapshot: the log
            # is truncated up to it, past the ledgers of every older snapshot.
            nonlocal sent
            for _ in range(6):
                await a.submit(f"c{sent}".encode())
                sent += 1
            assert await a.snapshot_now() is not None

        await snapshot_and_truncate_past_it()
        log = TruncatedBeforeOpens(
            await client.open_log(log_name, roll_policy=RollPolicy(max_entries=5)),
            snapshot_and_truncate_past_it,
            times=2,
        )
        b = AsyncStateMachine(cast(AsyncLog, log), b_state, node_id="b", snapshot_policy=policy)
        await b.start()
        try:
            await b.wait_for(lambda: log.ran == 2 and b_state.seen == a_state.seen, 30)
        finally:
            await b.close()
    assert a_state.seen == [f"c{i}" for i in range(18)]


async def test_a_fenced_leader_steps_down_and_applies_the_new_leaders_commands(
    cluster: LocalCluster, log_name: str
) -> None:
    uri = cluster.metadata_uri
    zombie_state, rival_state = Counter(), Counter()
    async with node(uri, log_name, "a", zombie_state, election="zombie-" + log_name) as (_, a):
        await a.wait_for(lambda: is_leader(a), 30)
        await a.submit(b"before")
        # Another election: the rival leads too, as a paused leader's successor would.
        async with node(uri, log_name, "b", rival_state, election="rival-" + log_name) as (
            _,
            b,
        ):
            await b.wait_for(lambda: is_leader(b), 30)
            assert await b.submit(b"rival") == 2
            with pytest.raises(WriterFencedError):
                await a.submit(b"zombie")
            await a.wait_for(lambda: zombie_state.seen == rival_state.seen, 30)
    assert rival_state.seen == ["before", "rival"]


async def test_a_node_without_a_snapshot_refuses_a_log_truncated_before_it(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        log = await client.open_log(log_name)
        async with await log.open_writer() as writer:
            first = await writer.append(b"c0")
            await writer.roll()
            await writer.append(b"c1")
            assert await log.truncate(Position(first.ledger_id + 1, 0, 0)) == 1
        machine = AsyncStateMachine(log, Counter(), node_id="a")
        with pytest.raises(DataLossError, match="no valid snapshot covers what went"):
            await machine.start()


async def test_a_retried_command_is_applied_once_and_answered_with_its_first_result(
    cluster: LocalCluster, log_name: str
) -> None:
    uri = cluster.metadata_uri
    a_state, b_state = Counter(), Counter()
    async with leader_and_standby(uri, log_name, a_state, b_state) as (a, b):
        assert await a.submit(b"c0", client_id="teller", seq=0) == 1
        assert await a.submit(b"c1", client_id="teller", seq=1) == 2
        assert await a.submit(b"c1", client_id="teller", seq=1) == 2  # the same leader
        with pytest.raises(ValueError, match="both client_id and seq"):
            await a.submit(b"c1", client_id="teller")
        await hand_over(a, b, a_state, b_state)  # to b, which applied c1 as a standby
        assert await b.submit(b"c1", client_id="teller", seq=1) == 2  # its first result
        assert await b.submit(b"c2", client_id="teller", seq=2) == 3
        assert await b.submit(b"plain") == 4
    assert b_state.seen == ["c0", "c1", "c2", "plain"]

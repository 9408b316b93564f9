"""The read barrier against real bookies: past every record acknowledged before the call,
while a writer of another client writes (and rolls), and readable once it returned; a
standby state machine node's linearizable read sees the leader's latest answered command."""

from __future__ import annotations

import asyncio
import contextlib
from typing import IO

import pytest

import walog
import walog.aio
from walog.ledger.reader import AsyncLedgerReader
from walog.log.position import Position, Record
from walog.log.retention import RollPolicy
from walog.log.writer import AsyncLogWriter
from walog.recipes import Role, StateMachine
from walog.testing import LocalCluster

BARRIERS = 40


async def _write_until(writer: AsyncLogWriter, acked: list[Position], stop: asyncio.Event) -> None:
    index = 0
    while not stop.is_set():
        burst = [writer.append_nowait(b"r%d" % (index + i)) for i in range(1 + index % 5)]
        index += len(burst)
        for future in burst:
            future.add_done_callback(lambda f: acked.append(f.result()))
        await asyncio.wait(burst)
        await asyncio.sleep(0.002 * (index % 3))


async def test_read_barrier_is_past_every_record_acknowledged_before_it(
    any_cluster: LocalCluster, log_name: str
) -> None:
    async with (
        await walog.aio.connect(any_cluster.metadata_uri) as writing,
        await walog.aio.connect(any_cluster.metadata_uri) as reading,
    ):
        writer_log = await writing.open_log(log_name, roll_policy=RollPolicy(max_entries=7))
        writer = await writer_log.open_writer()
        log = await reading.open_log(log_name)
        reader = await log.open_reader("earliest")
        acked: list[Position] = []
        stop = asyncio.Event()
        writing_task = asyncio.create_task(_write_until(writer, acked, stop))
        seen: list[Position] = []
        barriers: list[Position] = []
        try:
            for _ in range(BARRIERS):
                before = max(acked, default=None)  # acknowledged before the call began
                barrier = await log.read_barrier(timeout=30)
                barriers.append(barrier)
                assert before is None or before < barrier, (before, barrier)
                # Every record before the barrier is readable now.
                wanted = max((p for p in acked if p < barrier), default=None)
                while wanted is not None and (not seen or seen[-1] < wanted):
                    record = await reader.read_next(timeout=10)
                    assert record is not None, f"nothing readable past {seen[-1:]} < {barrier}"
                    seen.append(record.position)
        finally:
            stop.set()
            await writing_task
            await reader.close()
            await writer.close()
        assert barriers == sorted(barriers)
        assert len({b.ledger_id for b in barriers}) > 1, "the writer never rolled"
        assert set(acked) >= set(seen) and seen == sorted(seen)


async def test_read_barrier_of_an_empty_log_and_of_a_closed_ledger(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        log = await client.open_log(log_name)
        assert await log.read_barrier() == Position(0, 0, 0)
        writer = await log.open_writer()
        first = await asyncio.gather(*(writer.append_nowait(b"x") for _ in range(3)))
        assert await log.read_barrier() == Position(first[0].ledger_id, 0, 3)
        await writer.close()
        # Closed, nothing newer listed: the barrier is just after its last record.
        assert await log.read_barrier() == Position(first[0].ledger_id, 0, 3)
        takeover = await log.open_writer()
        assert await log.read_barrier() == Position(takeover.ledger_id, 0, 0)
        await takeover.close()


async def test_a_barrier_whose_tail_its_bookies_show_confirmed_waits_for_no_lac_news(
    cluster: LocalCluster, log_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        await walog.aio.connect(cluster.metadata_uri) as writing,
        await walog.aio.connect(cluster.metadata_uri) as reading,
    ):
        writer = await (await writing.open_log(log_name)).open_writer()
        last = (await asyncio.gather(*(writer.append_nowait(b"x") for _ in range(5))))[-1]
        # The idle writer tells its bookies the LAC by a message of its own: wait for it.
        handle = await reading.open_ledger(last.ledger_id, recovery=False)
        assert await handle.wait_last_add_confirmed(last.entry_id - 1, 30) == last.entry_id
        await handle.close()

        async def no_news(*_args: object) -> int:
            raise AssertionError("the barrier waited for LAC news its bookies had given")

        monkeypatch.setattr(AsyncLedgerReader, "wait_last_add_confirmed", no_news)
        barrier = await (await reading.open_log(log_name)).read_barrier(timeout=30)
        assert barrier == Position(last.ledger_id, last.entry_id, last.slot + 1)
        await writer.close()


class Register:
    """The last value written."""

    def __init__(self) -> None:
        self.value: bytes | None = None

    def apply(self, record: Record) -> bytes:
        self.value = record.data
        return record.data

    def snapshot(self) -> bytes:
        return self.value or b""

    def restore(self, data: IO[bytes], position: Position) -> None:
        self.value = data.read() or None


def test_a_standby_reads_the_latest_answered_command_linearizably(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as one, walog.connect(cluster.metadata_uri) as two:
        leader_service, standby_service = Register(), Register()
        leader = StateMachine(one.open_log(log_name), leader_service, node_id="a")
        leader.start()
        leader.wait_leader(timeout=30)
        standby = StateMachine(two.open_log(log_name), standby_service, node_id="b")
        standby.start()
        try:
            assert standby.role is not Role.LEADER
            for i in range(20):
                leader.execute(b"v%d" % i, timeout=30)
                # Answered before the read began: a linearizable read on the standby sees it.
                got = standby.read(lambda s: s.value, "linearizable", timeout=30)
                assert got == b"v%d" % i
            # Nothing written since: the stale read finds the same state.
            assert standby.read(lambda s: s.value, "stale") == b"v19"
        finally:
            with contextlib.suppress(Exception):
                standby.close()
            leader.close()

"""Tailing log readers against real bookies: rolls, writer changes, start points, loss."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import walog
import walog.aio
from walog.aio import AsyncClient
from walog.errors import DataLossError
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.metadata.layout import log_path
from walog.testing import LocalCluster


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


async def test_tailing_across_many_rolls_never_fences_the_writer(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name, roll_policy=RollPolicy(max_entries=2))
    writer = await log.open_writer()
    reader = await log.open_reader("earliest")
    total = 60

    async def produce() -> None:
        for i in range(total):
            await writer.append(b"%d" % i)
            if i % 5 == 4:
                await writer.roll()  # on top of the policy's rolls

    producer = asyncio.create_task(produce())
    seen = []
    for _ in range(total):
        record = await reader.read_next(timeout=30)
        assert record is not None, f"reader stalled after {len(seen)} records"
        seen.append(record)
    await producer
    assert [r.data for r in seen] == [b"%d" % i for i in range(total)]
    positions = [r.position for r in seen]
    assert positions == sorted(positions)
    assert len({p.ledger_id for p in positions}) >= 10
    await writer.flush()  # not fenced by the reader
    assert (await log.metadata()).epoch == 1
    await writer.close()
    await reader.close()


async def test_reader_follows_a_writer_change(client: AsyncClient, log_name: str) -> None:
    log = await client.open_log(log_name)
    first = await log.open_writer()
    reader = await log.open_reader("earliest")
    for i in range(3):
        await first.append(b"a%d" % i)
    got = [await reader.read_next(timeout=30) for _ in range(3)]
    waiting = asyncio.create_task(reader.read_next(timeout=30))
    await asyncio.sleep(0)  # the reader is tailing the first writer's ledger
    second = await log.open_writer()
    await second.append(b"b0")
    got.append(await waiting)
    assert [r.data for r in got if r is not None] == [b"a0", b"a1", b"a2", b"b0"]
    await second.close()
    await first.close()
    await reader.close()


async def test_latest_starts_after_existing_records(client: AsyncClient, log_name: str) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    old = await writer.append(b"old")
    # "latest" means after the last add confirmed the bookies know of; wait until the
    # writer's LAC for "old" reached them (piggybacked or sent explicitly when idle).
    handle = await client.open_ledger(old.ledger_id, recovery=False)
    assert await handle.wait_last_add_confirmed(old.entry_id - 1, timeout=30) >= old.entry_id
    await handle.close()
    reader = await log.open_reader("latest")
    assert await reader.read_next(timeout=0.3) is None
    await writer.append(b"new")
    record = await reader.read_next(timeout=30)
    assert record is not None and record.data == b"new"
    await writer.close()
    await reader.close()


async def test_reader_starts_at_a_position_inside_an_entry(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    positions = await asyncio.gather(*(writer.append_nowait(b"%d" % i) for i in range(5)))
    await writer.close()
    reader = await log.open_reader(positions[2])
    record = await reader.read_next(timeout=30)
    assert record is not None and record.position == positions[2] and record.data == b"2"
    await reader.close()


async def test_record_timestamps_are_the_writer_wall_clock(
    client: AsyncClient, log_name: str
) -> None:
    import time

    log = await client.open_log(log_name)
    writer = await log.open_writer()
    before = time.time()
    await writer.append(b"t")
    after = time.time()
    await writer.close()
    reader = await log.open_reader()
    record = await reader.read_next(timeout=30)
    assert record is not None and before <= record.timestamp <= after
    await reader.close()


async def test_truncated_position_raises_data_loss(client: AsyncClient, log_name: str) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    gone = await writer.append(b"gone")
    await writer.roll()
    kept = await writer.append(b"kept")
    reader = await log.open_reader("earliest")  # stands in the first ledger, unread
    assert await log.truncate(kept) == 1
    with pytest.raises(DataLossError, match="truncated"):
        await log.open_reader(gone)
    with pytest.raises(DataLossError):
        while True:
            record = await reader.read_next(timeout=30)
            assert record is not None and record.data != b"kept", "read past a truncated gap"
    fresh = await log.open_reader("earliest")
    record = await fresh.read_next(timeout=30)
    assert record is not None and record.data == b"kept"
    await writer.close()
    await fresh.close()
    await reader.close()


async def test_a_slow_reader_past_a_truncated_ledger_raises_data_loss(
    client: AsyncClient, log_name: str
) -> None:
    # The reader has read all of its ledger; while nobody calls it, the writer rolls twice
    # and the log is truncated through the ledger in between, which the reader never read.
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    reader = await log.open_reader("earliest")
    await writer.append(b"read")
    record = await reader.read_next(timeout=30)
    assert record is not None and record.data == b"read"
    assert await reader.read_next(timeout=0.3) is None  # tailing the first ledger
    await writer.roll()
    await writer.append(b"never read")
    await writer.roll()
    kept = await writer.append(b"kept")
    assert await log.truncate(kept) == 2
    with pytest.raises(DataLossError, match="truncated"):
        while True:
            record = await reader.read_next(timeout=30)
            assert record is not None and record.data != b"kept", "read past a truncated gap"
    await writer.close()
    await reader.close()


async def test_a_reader_done_with_its_ledger_never_skips_truncated_ledgers_after_it(
    client: AsyncClient, log_name: str
) -> None:
    # The reader has read all of a closed ledger; the ledgers after it that it never read
    # are truncated before it moves on. Moving to the next listed ledger would skip them.
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    for i in range(3):
        await writer.append(b"first %d" % i)
    await writer.roll()
    await writer.append(b"never read")
    await writer.roll()
    kept = await writer.append(b"kept")
    reader = await log.open_reader("earliest")
    for i in range(3):
        record = await reader.read_next(timeout=30)
        assert record is not None and record.data == b"first %d" % i
    # Watches are called in the order they were set: once this one ran, so did the
    # reader's, and the reader sees the truncated list on its next step.
    loop = asyncio.get_running_loop()
    seen = asyncio.Event()
    unwatch = client.ctx.store.watch(
        log_path(log_name), lambda: loop.call_soon_threadsafe(seen.set)
    )
    assert await log.truncate(kept) == 2
    await asyncio.wait_for(seen.wait(), 30)
    unwatch()
    with pytest.raises(DataLossError, match="truncated"):
        while True:
            record = await reader.read_next(timeout=30)
            assert record is not None and record.data != b"kept", "read past a truncated gap"
    await writer.close()
    await reader.close()


def test_sync_facade_appends_and_tails(cluster: LocalCluster, log_name: str) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        with log.open_writer() as writer, log.open_reader() as reader:
            futures = [writer.append_async(b"%d" % i) for i in range(200)]
            positions = [f.result(timeout=30) for f in futures]
            assert positions == sorted(positions)
            assert writer.append(b"last") > positions[-1]
            records = [reader.read_next(timeout=30) for _ in range(201)]
            assert [r.data for r in records if r is not None][-1] == b"last"
            assert [r.position for r in records if r is not None][:200] == positions
            assert reader.read_next(timeout=0.1) is None
        assert [s.state for s in log.segments()] == ["CLOSED"]
        assert isinstance(positions[0], walog.Position)
        assert Position.parse(str(positions[0])) == positions[0]


async def test_reader_survives_a_bookie_failure(
    cluster: LocalCluster, client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)  # E=3, Qw=3, Qa=2: every entry on every bookie
    writer = await log.open_writer()
    for i in range(10):
        await writer.append(b"%d" % i)
    await writer.close()
    cluster.kill(0)
    try:
        reader = await log.open_reader("earliest")
        records = [await reader.read_next(timeout=60) for _ in range(10)]
        assert [r.data for r in records if r is not None] == [b"%d" % i for i in range(10)]
        await reader.close()
    finally:
        cluster.restart(0)


@pytest.mark.zk
async def test_reader_follows_rolls_and_takeovers_on_zookeeper(
    zk_cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(zk_cluster.metadata_uri) as zk_client:
        log = await zk_client.open_log(log_name, roll_policy=RollPolicy(max_entries=3))
        reader = await log.open_reader("earliest")
        first = await log.open_writer()
        expected = []
        for i in range(7):
            expected.append(b"a%d" % i)
            await first.append(expected[-1])
        second = await log.open_writer()
        for i in range(4):
            expected.append(b"b%d" % i)
            await second.append(expected[-1])
        got = []
        for _ in expected:
            record = await reader.read_next(timeout=30)
            assert record is not None, f"reader stalled after {got}"
            got.append(record.data)
        assert got == expected
        await second.close()
        await reader.close()

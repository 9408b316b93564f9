"""Log writer against real bookies: takeover fencing, batching, rolling, orphans, names."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import walog.aio
from walog.aio import AsyncClient
from walog.errors import LedgerClosedError, NoSuchLedgerError, WriterFencedError
from walog.log.ledgers import LOG_TAG
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.log.writer import LogWriterConfig
from walog.testing import LocalCluster


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


async def read_all(client: AsyncClient, name: str, count: int) -> list[tuple[Position, bytes]]:
    log = await client.open_log(name)
    reader = await log.open_reader("earliest")
    out: list[tuple[Position, bytes]] = []
    try:
        for _ in range(count):
            record = await reader.read_next(timeout=30)
            assert record is not None, f"only {len(out)} of {count} records arrived"
            out.append((record.position, record.data))
        assert await reader.read_next(timeout=0.2) is None
    finally:
        await reader.close()
    return out


async def test_takeover_fences_the_previous_writer(client: AsyncClient, log_name: str) -> None:
    log = await client.open_log(log_name)
    first = await log.open_writer()
    acked = [await first.append(b"a%d" % i) for i in range(3)]
    second = await log.open_writer()
    with pytest.raises(WriterFencedError):
        await first.append(b"late")
    with pytest.raises(WriterFencedError):
        first.append_nowait(b"later still")
    after = await second.append(b"b0")
    assert after > acked[-1]
    segments = await log.segments()
    assert [s.state for s in segments] == ["CLOSED", "OPEN"]
    assert segments[0].last_entry_id == acked[-1].entry_id
    await second.close()
    await first.close()  # a fenced writer closes quietly
    records = await read_all(client, log_name, 4)
    assert [d for _, d in records] == [b"a0", b"a1", b"a2", b"b0"]


async def test_records_appended_together_share_an_entry(client: AsyncClient, log_name: str) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    positions = await asyncio.gather(*(writer.append_nowait(b"%d" % i) for i in range(50)))
    assert positions == sorted(positions) and len(set(positions)) == 50
    assert {p.entry_id for p in positions} == {0}
    assert [p.slot for p in positions] == list(range(50))
    later = await writer.append(b"x")
    assert later == Position(positions[0].ledger_id, 1, 0)
    await writer.close()


async def test_entry_limits_split_batches_and_refuse_oversized_records(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    config = LogWriterConfig(max_entry_bytes=200, max_records_per_entry=4, linger=0.01)
    writer = await log.open_writer(config)
    positions = await asyncio.gather(*(writer.append_nowait(b"z" * 10) for i in range(10)))
    assert [p.slot for p in positions] == [0, 1, 2, 3] * 2 + [0, 1]
    with pytest.raises(ValueError, match="record of 200 bytes is over"):
        writer.append_nowait(b"z" * 200)
    with pytest.raises(TypeError):
        writer.append_nowait("text")  # type: ignore[arg-type]
    await writer.close()


async def test_bytes_like_records_are_copied_at_append_and_others_refused(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    buf = bytearray(b"abc")
    first = writer.append_nowait(buf)
    buf[:] = b"xyz"  # the record keeps what the buffer held when it was appended
    second = writer.append_nowait(memoryview(b"defg")[1:3])
    with pytest.raises(TypeError, match="bytes-like"):
        writer.append_nowait(3)  # type: ignore[arg-type]
    dropped = writer.append_nowait(b"its caller stopped waiting")
    dropped.cancel()  # cancels the wait only: the record keeps its slot
    last = await writer.append(b"end")
    ledger_id = last.ledger_id
    assert [await first, await second, last] == [
        Position(ledger_id, 0, 0),
        Position(ledger_id, 0, 1),
        Position(ledger_id, 0, 3),
    ]
    assert dropped.cancelled()
    await writer.close()
    records = await read_all(client, log_name, 4)
    assert [d for _, d in records] == [b"abc", b"ef", b"its caller stopped waiting", b"end"]


def test_sync_writer_copies_bytes_like_records_and_refuses_others(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as sync_client:
        log = sync_client.open_log(log_name)
        with log.open_writer() as writer, log.open_reader() as reader:
            buf = bytearray(b"abc")
            first = writer.append_async(buf)
            buf[:] = b"xyz"
            with pytest.raises(TypeError, match="not str"):
                writer.append_async("text")
            with pytest.raises(TypeError, match="bytes-like"):
                writer.append_async(3)
            last = writer.append(memoryview(b"defg")[1:3])
            assert first.result(timeout=30) < last
            records = [reader.read_next(timeout=30) for _ in range(2)]
            assert [(r.position, r.data) for r in records if r is not None] == [
                (first.result(), b"abc"),
                (last, b"ef"),
            ]


def test_sync_append_many_returns_positions_in_append_order(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as sync_client:
        log = sync_client.open_log(log_name)
        config = LogWriterConfig(max_records_per_entry=16)
        with log.open_writer(config) as writer, log.open_reader() as reader:
            single = writer.append_async(b"single")
            positions = writer.append_many(b"r%03d" % i for i in range(150))
            writer.roll()
            positions += writer.append_many(b"r%03d" % i for i in range(150, 300))
            assert single.result(timeout=30) < positions[0]
            assert positions == sorted(positions) and len(set(positions)) == 300
            assert positions[149].ledger_id < positions[150].ledger_id
            with pytest.raises(TypeError, match="not str"):
                writer.append_many([b"ok", "text"])  # type: ignore[list-item]
            assert writer.append_many([]) == []
            records = [reader.read_next(timeout=30) for _ in range(301)]
            assert [(r.position, r.data) for r in records if r is not None] == [
                (single.result(), b"single"),
                *((p, b"r%03d" % i) for i, p in enumerate(positions)),
            ]
            assert reader.read_next(timeout=0.2) is None, "nothing of the refused batch"


async def test_rolling_closes_the_previous_ledger_after_the_switch(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name, roll_policy=RollPolicy(max_entries=3))
    writer = await log.open_writer()
    for i in range(10):
        await writer.append(b"%d" % i)
        if writer._roll_task is not None:
            # Let the automatic roll land before the next append: how many appends fit
            # in a roll depends on the machine (appends flowing during a roll are the
            # next test's subject).
            await asyncio.shield(writer._roll_task)
    await writer.flush()
    await writer.close()
    segments = await log.segments()
    # Appends continue on the old ledger until the new one is in the list, so a rolled
    # ledger holds at least max_entries entries.
    assert len(segments) >= 3
    assert all(s.state == "CLOSED" for s in segments)
    assert all(s.last_entry_id >= 2 for s in segments[:-1])
    assert sum(s.last_entry_id + 1 for s in segments) == 10
    records = await read_all(client, log_name, 10)
    assert [d for _, d in records] == [b"%d" % i for i in range(10)]


async def test_explicit_roll_keeps_appends_flowing(client: AsyncClient, log_name: str) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    before = await writer.append(b"before")
    roll = asyncio.create_task(writer.roll())
    during = [writer.append_nowait(b"during%d" % i) for i in range(20)]
    await roll
    after = await writer.append(b"after")
    await asyncio.gather(*during)
    assert after.ledger_id > before.ledger_id
    await writer.close()
    records = await read_all(client, log_name, 22)
    assert [d for _, d in records] == [b"before", *(b"during%d" % i for i in range(20)), b"after"]


async def test_a_roll_leaves_no_empty_ledger_in_the_list(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    await writer.roll()  # nothing appended yet: the takeover's ledger stays
    assert [s.ledger_id for s in await log.segments()] == [writer.ledger_id]
    first = await writer.append(b"first")
    await writer.roll()
    await writer.roll()  # nothing appended since the last one switched
    second = await writer.append(b"second")
    await writer.close()
    segments = await log.segments()
    assert [s.ledger_id for s in segments] == [first.ledger_id, second.ledger_id]
    assert [s.last_entry_id for s in segments] == [0, 0]


async def test_a_roll_that_switched_succeeds_though_close_began_meanwhile(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    before = await writer.append(b"before")
    roll = asyncio.create_task(writer.roll())
    await asyncio.sleep(0)  # the roll is under way (creating the next ledger)
    await writer.close()  # waits for the roll, then closes the ledger it switched to
    await roll  # switched before the writer closed: no LedgerClosedError
    assert [s.state for s in await log.segments()] == ["CLOSED", "CLOSED"]
    assert (await log.segments())[0].ledger_id == before.ledger_id
    with pytest.raises(LedgerClosedError):
        await writer.roll()  # a roll that did not start before close cannot switch


async def test_duelling_takeovers_leave_one_writer_and_no_orphan_ledger(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writers = await asyncio.gather(*(log.open_writer() for _ in range(4)))
    results = await asyncio.gather(*(w.append(b"x") for w in writers), return_exceptions=True)
    winners = [r for r in results if isinstance(r, Position)]
    assert len(winners) == 1, results
    assert all(isinstance(r, WriterFencedError) for r in results if r not in winners)
    meta = await log.metadata()
    assert meta.epoch == 4
    listed = set(meta.ledger_ids)
    for ledger_id in await client.list_ledgers():
        try:
            md = await client.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            continue
        if (md.custom_metadata or {}).get(LOG_TAG) == log_name:
            assert ledger_id in listed, f"orphan ledger {ledger_id} of {log_name}"
    for w in writers:
        await w.close()


@pytest.mark.parametrize("bad", ["", "a/b", "..", "x\n", "y" * 201])
async def test_open_log_refuses_bad_names(client: AsyncClient, bad: str) -> None:
    with pytest.raises(ValueError):
        await client.open_log(bad)


async def test_list_and_delete_logs(client: AsyncClient, log_name: str) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    position = await writer.append(b"x")
    assert log_name in await client.list_logs()
    await client.delete_log(log_name)
    assert log_name not in await client.list_logs()
    with pytest.raises(NoSuchLedgerError):
        await client.ledger_metadata(position.ledger_id)
    with pytest.raises(WriterFencedError):
        await writer.append(b"y")


async def test_takeover_drops_recovered_empty_ledgers(client: AsyncClient, log_name: str) -> None:
    log = await client.open_log(log_name)
    idle = await log.open_writer()  # never appends
    busy = await log.open_writer()
    assert [s.ledger_id for s in await log.segments()] == [busy.ledger_id]
    with pytest.raises(NoSuchLedgerError):
        await client.ledger_metadata(idle.ledger_id)
    position = await busy.append(b"kept")
    third = await log.open_writer()
    assert [s.ledger_id for s in await log.segments()] == [position.ledger_id, third.ledger_id]
    await third.close()

"""Positions found by time against real bookies: monotone timestamps across takeovers with
skewed clocks, the ledgers' recorded time ranges, ``position_at`` over a log of 1,000
ledgers within its read bound, and readers opened at a time (docs/time.md)."""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import time
from collections.abc import AsyncIterator, Callable

import pytest

import walog
import walog.aio
from walog.aio import AsyncClient
from walog.log.async_log import AsyncLog
from walog.log.position import Position, Record
from walog.log.retention import RollPolicy
from walog.log.time_search import micros, read_bound
from walog.log.time_seek import find_position
from walog.log.writer import AsyncLogWriter
from walog.metadata.layout import log_path
from walog.testing import LocalCluster


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


async def _read_all(log: AsyncLog, count: int) -> list[Record]:
    reader = await log.open_reader("earliest")
    try:
        records: list[Record] = []
        for _ in range(count):
            record = await reader.read_next(timeout=30)
            assert record is not None, f"reader stalled after {len(records)} records"
            records.append(record)
        assert await reader.read_next(timeout=0.2) is None
        return records
    finally:
        await reader.close()


def _expected(records: list[Record], t: float) -> Position | None:
    for record in records:
        if micros(record.timestamp) >= micros(t):
            return record.position
    return None


def _skewed(seconds: float) -> Callable[[], float]:
    return lambda: time.time() + seconds


async def _writer(log: AsyncLog, skew: float) -> AsyncLogWriter:
    writer = await log.open_writer()
    writer._clock = _skewed(skew)  # before its first append: the hook tests use
    return writer


async def test_timestamps_never_decrease_across_takeovers_with_clocks_skewed_by_5_seconds(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name, roll_policy=RollPolicy(max_entries=3))
    count = 0
    ahead = await _writer(log, +5.0)
    for i in range(10):
        await ahead.append(b"a%d" % i)
    count += 10
    # A takeover while the first writer lives (it is fenced, its ledgers recovered) by a
    # writer whose clock runs 10 s behind, then one 5 s ahead again, then one behind after
    # a clean close.
    behind = await _writer(log, -5.0)
    for i in range(10):
        await behind.append(b"b%d" % i)
    count += 10
    ahead_again = await _writer(log, +5.0)
    for i in range(10):
        await ahead_again.append(b"c%d" % i)
    count += 10
    await ahead_again.close()
    behind_again = await _writer(log, -5.0)
    for i in range(10):
        await behind_again.append(b"d%d" % i)
    count += 10
    await behind_again.close()
    for old in (ahead, behind):
        await old.close()
    records = await _read_all(log, count)
    stamps = [r.timestamp for r in records]
    assert stamps == sorted(stamps), "a timestamp decreased"
    by_writer = {p: [r.timestamp for r in records if r.data[0] == p] for p in b"abcd"}
    # The writers behind stamp their predecessor's last timestamp until their clocks catch up.
    assert min(by_writer[ord("b")]) == max(by_writer[ord("a")])
    assert min(by_writer[ord("d")]) == max(by_writer[ord("c")])
    await _check_ranges(log, records)


async def _check_ranges(log: AsyncLog, records: list[Record]) -> None:
    """Every CLOSED ledger with records has its first and last records' timestamps in the
    log's record."""
    meta = await log.metadata()
    for info in meta.ledgers:
        mine = [r.timestamp for r in records if r.position.ledger_id == info.ledger_id]
        if info.is_closed and mine:
            assert info.time_range == (mine[0], mine[-1]), info


async def test_a_writer_stamps_no_lower_than_a_last_record_whose_range_is_not_recorded(
    client: AsyncClient, cluster: LocalCluster, log_name: str
) -> None:
    log = await client.open_log(log_name)
    first = await _writer(log, +5.0)
    await first.append(b"a")
    await first.roll()
    await first.append(b"b")
    await first.close()
    # As an older release leaves the record: no ranges kept.
    store = client.ctx.store
    raw, version = await store.get(log_path(log_name))
    doc = json.loads(raw)
    assert doc.pop("ledger_times")
    await store.set(log_path(log_name), json.dumps(doc).encode(), version)
    second = await _writer(log, -5.0)
    await second.append(b"c")
    await second.close()
    stamps = [r.timestamp for r in await _read_all(log, 3)]
    assert stamps[2] == stamps[1] and stamps == sorted(stamps)


async def test_timestamps_within_one_writer_never_decrease_when_its_clock_steps_back(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    ticks = iter([100.0, 200.0, 150.0, 90.0, 250.0])
    writer._clock = lambda: next(ticks)
    for i in range(5):
        await writer.append(b"%d" % i)
    await writer.close()
    assert [r.timestamp for r in await _read_all(log, 5)] == [100, 200, 200, 200, 250]


@pytest.mark.parametrize(
    "ledgers",
    # 1,000 rolls each rewrite a record that grows with the list: minutes on a busy machine.
    [100, pytest.param(1000, marks=[pytest.mark.slow, pytest.mark.timeout(900)], id="1000")],
    ids=str,
)
async def test_position_at_in_a_log_of_many_ledgers_is_the_first_record_at_or_after_t(
    client: AsyncClient, log_name: str, ledgers: int
) -> None:
    """1,000 random queries, each compared with a full read, each within the read bound.
    A log of 1,000 ledgers takes about two minutes to build (every roll rewrites the
    log's record, which grows with the list): that run is marked slow."""
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    rng = random.Random(11)
    clock = 1.7e9
    count = 0

    def tick() -> float:
        return clock

    writer._clock = tick
    for _ in range(ledgers):
        futures = []
        for _ in range(rng.choice([1, 2, 3, 5])):
            clock += rng.choice([0.0, 0.000001, 0.25, 3.0])
            futures.append(writer.append_nowait(b"%d" % count))
            count += 1
            if rng.random() < 0.3:
                await asyncio.sleep(0)  # the next records go in an entry of their own
        await asyncio.gather(*futures)
        await writer.roll()
    await writer.close()
    records = await _read_all(log, count)
    meta = await log.metadata()
    assert len([i for i in meta.ledgers if i.last_entry_id >= 0]) >= ledgers
    await _check_ranges(log, records)
    entries = {i.ledger_id: i.last_entry_id + 1 for i in meta.ledgers}
    low, high = records[0].timestamp - 1, records[-1].timestamp + 1
    queries = [rng.choice(records).timestamp for _ in range(300)]
    queries += [rng.uniform(low, high) for _ in range(700)]
    for t in queries:
        answer = await find_position(client, meta, t, b"")
        assert answer.position == _expected(records, t), t
        for ledger_id, reads in answer.reads.items():
            assert reads <= read_bound(entries[ledger_id]), (t, ledger_id, reads)
    assert await log.position_at(high) is None
    assert await log.position_at(low) == records[0].position


async def test_position_at_reads_the_open_ledger_up_to_its_last_add_confirmed(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    positions = [await writer.append(b"%d" % i) for i in range(20)]
    await writer.flush()
    records = await _read_all(log, 20)
    for record in records:
        assert await log.position_at(record.timestamp) == _expected(records, record.timestamp)
    assert positions[0] == await log.position_at(0)
    await writer.close()


async def test_open_reader_at_a_time_starts_at_the_first_record_at_or_after_it(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name, roll_policy=RollPolicy(max_entries=2))
    writer = await log.open_writer()
    for i in range(9):
        await writer.append(b"%d" % i)
    records = await _read_all(log, 9)
    at = datetime.datetime.fromtimestamp(records[4].timestamp, datetime.UTC)
    reader = await log.open_reader(at=at)
    first = await reader.read_next(timeout=30)
    assert first is not None and first.position == _expected(records, at.timestamp())
    await reader.close()
    # Past every record: the reader starts at the log's end and returns what follows.
    late = await log.open_reader(at=records[-1].timestamp + 3600)
    await writer.append(b"new")
    record = await late.read_next(timeout=30)
    assert record is not None and record.data == b"new"
    await late.close()
    with pytest.raises(ValueError, match="naive datetime"):
        await log.open_reader(at=datetime.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="not both"):
        await log.open_reader("latest", at=0)
    await writer.close()


def test_the_sync_log_finds_positions_and_opens_readers_by_time(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as sync_client:
        log = sync_client.open_log(log_name)
        with log.open_writer() as writer:
            positions = [writer.append(b"%d" % i) for i in range(5)]
        with log.open_reader() as reader:
            records = [reader.read_next(timeout=30) for _ in range(5)]
        stamps = [r.timestamp for r in records if r is not None]
        assert log.position_at(stamps[3]) == _expected([r for r in records if r], stamps[3])
        assert log.position_at(stamps[-1] + 1) is None
        with log.open_reader(at=stamps[2]) as reader:
            record = reader.read_next(timeout=30)
            assert record is not None and record.position <= positions[2]
            assert micros(record.timestamp) >= micros(stamps[2])

"""One record size limit: a log's writer checks its limit at open against the client's and
the bookies' (announced in their registrations), a record over it fails alone, and a
bookie's refusal of an oversized entry is reported as such, never as lost bookies, never
leaving a dead writer or an OPEN ledger; the records that merely shared a refused ledger
with an oversized one go to the next ledger, in their order."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

import walog
import walog.aio
from walog.log.async_log import AsyncLog
from walog.testing import LocalCluster

SMALL = 64 * 1024  # the --max-entry-bytes of the bookie that refuses
ONE = walog.LogConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)


def _onto_a_small_bookie(cluster: LocalCluster) -> str:
    """A bookie that stores less joins after the writer opened, and the only other one
    stops: the writer's next ledger can only go to the small one. Returns its id."""
    small = cluster.add_bookie()
    cluster.restart(small, extra_args=["--max-entry-bytes", str(SMALL)])
    cluster.stop(0)
    return small


async def _read_all(log: AsyncLog) -> list[bytes]:
    """Every record of ``log``, from the earliest, until none comes for a while."""
    reader = await log.open_reader()
    records = []
    try:
        while (record := await reader.read_next(timeout=2)) is not None:
            records.append(record.data)
    finally:
        await reader.close()
    return records


def _payloads(log: walog.Log, count: int) -> list[bytes]:
    """The first ``count`` records of ``log``; asserts there are no more."""
    with log.open_reader() as reader:
        records = [reader.read_next(timeout=30) for _ in range(count)]
        assert reader.read_next(timeout=0.3) is None
    return [record.data for record in records if record is not None]


def test_a_writer_is_refused_at_open_when_its_limit_is_over_a_bookies(tmp_path: Path) -> None:
    args = ["--max-entry-bytes", str(SMALL)]
    with (
        LocalCluster(1, data_dir=tmp_path, bookie_args=args) as cluster,
        walog.connect(cluster.metadata_uri) as client,
    ):
        log = client.create_log("big", ONE)  # the default limit, over the bookie's
        with pytest.raises(ValueError, match=rf"{cluster.bookie_ids[0]} stores at most {SMALL}"):
            log.open_writer()
        assert log.segments() == []  # refused before any ledger was made
        fits = client.create_log("fits", dataclasses.replace(ONE, max_entry_bytes=SMALL))
        with fits.open_writer() as writer:
            assert writer.append(b"x" * (SMALL - 100)).ledger_id >= 0


def test_a_writer_is_refused_at_open_when_its_limit_is_over_the_clients(
    cluster: LocalCluster, log_name: str
) -> None:
    config = walog.ClientConfig(max_entry_bytes=1 << 20)
    with walog.connect(cluster.metadata_uri, config=config) as client:
        log = client.create_log(log_name, walog.LogConfig(max_entry_bytes=2 << 20))
        with pytest.raises(ValueError, match=r"ClientConfig\.max_entry_bytes=1048576"):
            log.open_writer()
        assert log.segments() == []


def test_a_record_over_the_limit_fails_alone_naming_its_size_and_the_limit(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.create_log(log_name, walog.LogConfig(max_entry_bytes=4096))
        with log.open_writer() as writer:
            first = writer.append(b"before")
            with pytest.raises(walog.RecordTooLargeError, match="record of 5000 bytes") as caught:
                writer.append(b"x" * 5000)
            assert caught.value.size == 5000 and caught.value.limit is not None
            assert str(caught.value.limit) in str(caught.value)
            after = writer.append(b"y" * 100)  # the writer goes on
            assert after > first
        assert _payloads(log, 2) == [b"before", b"y" * 100]


async def test_a_record_over_the_limit_fails_alone_on_the_asyncio_api(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        log = await client.create_log(log_name, walog.LogConfig(max_entry_bytes=4096))
        writer = await log.open_writer()
        with pytest.raises(walog.RecordTooLargeError, match="5000 bytes"):
            writer.append_nowait(b"x" * 5000)
        assert (await writer.append(b"small")).ledger_id == writer.ledger_id
        await writer.close()


def test_a_bookies_refusal_of_a_ledger_entry_is_too_large_not_lost_bookies(
    tmp_path: Path,
) -> None:
    args = ["--max-entry-bytes", str(SMALL)]
    with (
        LocalCluster(1, data_dir=tmp_path, bookie_args=args) as cluster,
        walog.connect(cluster.metadata_uri) as client,
    ):
        writer = client.create_ledger(1, 1, 1)
        assert writer.append(b"fits") == 0
        with pytest.raises(walog.RecordTooLargeError, match=rf"max_entry_bytes={SMALL}"):
            writer.append(b"x" * (SMALL + 1))
        writer.close()  # closes at the last confirmed entry
        metadata = client.ledger_metadata(writer.ledger_id)
        assert metadata.state == "CLOSED" and metadata.last_entry_id == 0


def test_a_bookies_refusal_fails_the_record_and_the_log_writer_goes_on_in_a_new_ledger(
    tmp_path: Path,
) -> None:
    with (
        LocalCluster(1, data_dir=tmp_path) as cluster,
        walog.connect(cluster.metadata_uri) as client,
    ):
        log = client.create_log("refused", ONE)
        with log.open_writer() as writer:
            first = writer.append(b"before")
            small = _onto_a_small_bookie(cluster)
            writer.roll()
            on_small = writer.append(b"on the small bookie")
            with pytest.raises(
                walog.RecordTooLargeError, match=rf"over its max_entry_bytes={SMALL}"
            ) as caught:
                writer.append(b"x" * (SMALL + 1))
            assert caught.value.size == SMALL + 1 and small in str(caught.value)
            assert caught.value.limit == SMALL - 17  # the largest record its entries hold
            after = writer.append(b"y" * 100)  # not a dead writer
            assert after.ledger_id > on_small.ledger_id > first.ledger_id
            refused = client.ledger_metadata(on_small.ledger_id)
            assert refused.state == "CLOSED" and refused.last_entry_id == on_small.entry_id
            with pytest.raises(walog.RecordTooLargeError, match="record of"):
                writer.append(b"z" * SMALL)  # the writer now knows the bookie's limit
            assert writer.append(b"last").ledger_id == after.ledger_id
        cluster.restart(0)
        assert _payloads(log, 4) == [b"before", b"on the small bookie", b"y" * 100, b"last"]


async def test_records_batched_with_a_refused_one_go_to_the_next_ledger_and_only_it_fails(
    tmp_path: Path,
) -> None:
    with LocalCluster(1, data_dir=tmp_path) as cluster:
        async with await walog.aio.connect(cluster.metadata_uri) as client:
            log = await client.create_log("refused", ONE)
            # Three records an entry: the refused ledger holds several unacknowledged entries.
            writer = await log.open_writer(walog.LogWriterConfig(max_records_per_entry=3))
            await writer.append(b"before")
            await asyncio.to_thread(_onto_a_small_bookie, cluster)
            await writer.roll()
            on_small = await writer.append(b"on the small bookie")
            # Appended in one turn: entries [a, b, X], [c, d, e], [f]. X alone is over the
            # bookie's limit; c, d and e each fit, but not together.
            payloads = [b"a" * 1000, b"b" * 1000, b"X" * (SMALL + 1)]
            payloads += [bytes([ord("c") + i]) * 30000 for i in range(3)] + [b"f" * 1000]
            futures = [writer.append_nowait(payload) for payload in payloads]
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
            refused = outcomes.pop(2)
            assert isinstance(refused, walog.RecordTooLargeError), refused
            assert refused.size == SMALL + 1 and f"record of {SMALL + 1} bytes" in str(refused)
            assert refused.limit == SMALL - 17 and f"max_entry_bytes={SMALL}" in str(refused)
            assert all(isinstance(position, walog.Position) for position in outcomes), outcomes
            positions: list[walog.Position] = outcomes  # type: ignore[assignment]
            assert positions == sorted(positions) and len(set(positions)) == len(positions)
            assert all(p.ledger_id > on_small.ledger_id for p in positions)
            closed = await client.ledger_metadata(on_small.ledger_id)
            assert closed.state == "CLOSED" and closed.last_entry_id == on_small.entry_id
            await writer.close()
            await asyncio.to_thread(cluster.restart, 0)
            expected = [b"before", b"on the small bookie", *payloads[:2], *payloads[3:]]
            assert await _read_all(log) == expected


async def test_records_appended_during_a_refusal_are_acknowledged_and_appends_go_on_after(
    tmp_path: Path,
) -> None:
    with LocalCluster(1, data_dir=tmp_path) as cluster:
        async with await walog.aio.connect(cluster.metadata_uri) as client:
            log = await client.create_log("refused", ONE)
            writer = await log.open_writer()
            await asyncio.to_thread(_onto_a_small_bookie, cluster)
            await writer.roll()
            big = writer.append_nowait(b"X" * (SMALL + 1))
            # One record a turn until the refusal is answered: sent to the refused ledger,
            # batched or held, each must reach the log after it, in order.
            during: list[asyncio.Future[walog.Position]] = []
            while not big.done():
                assert len(during) < 100_000, "the bookie never answered the refused entry"
                during.append(writer.append_nowait(b"%06d" % len(during) + b"." * 20000))
                await asyncio.sleep(0)
            assert during, "the refusal came before any other record was appended"
            with pytest.raises(walog.RecordTooLargeError, match=f"record of {SMALL + 1} bytes"):
                await big
            positions = list(await asyncio.gather(*during))
            # Afterwards: one record, then more than the bookie stores in one entry.
            positions.append(await writer.append(b"after"))
            burst = [writer.append_nowait(b"%d" % i * 30000) for i in range(4)]
            positions += await asyncio.gather(*burst)
            assert positions == sorted(positions) and len(set(positions)) == len(positions)
            assert len({p.ledger_id for p in positions}) == 1  # no second refusal, no roll
            with pytest.raises(walog.RecordTooLargeError, match="record of"):
                writer.append_nowait(b"z" * SMALL)  # the writer knows the bookie's limit
            await writer.close()
            expected = [b"%06d" % i + b"." * 20000 for i in range(len(during))]
            expected += [b"after"] + [b"%d" % i * 30000 for i in range(4)]
            assert await _read_all(log) == expected

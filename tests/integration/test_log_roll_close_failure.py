"""A roll whose old ledger cannot be closed still leaves a log readers can pass.

Readers never fence, so they cannot move past a ledger that is OPEN: its last entries may lie
beyond the last add confirmed they know of. When the writer's close of the ledger it rolled
away from fails (here: a VOLATILE ledger whose close cannot force every acknowledged entry
to Qa bookies, because one is down), the writer closes it by recovery instead, in the
background, retried until it succeeds; records appended after the roll wait for that close
(a VOLATILE ledger's acknowledged entries are durable only once it is closed), and fail if
it never comes; a takeover, or a sink's commit, recovers every ledger the list still shows
OPEN, not only the last two.

Real bookie processes; a bookie is stopped cleanly so that it leaves the registry and the
next ledger is placed on the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import walog.aio
import walog.log.retire
from tests.integration.waiting import eventually
from walog.aio import AsyncClient
from walog.errors import WalogError
from walog.ledger.options import LedgerOptions
from walog.log.async_log import AsyncLog
from walog.log.records import encode_records
from walog.log.sink import SinkBatch, SinkLedger, commit_sink_batch
from walog.log.writer import AsyncLogWriter
from walog.testing import LocalCluster
from walog.wire.durability import Durability

SLOW_FLUSH = ["--volatile-flush-interval-s", "3600"]  # only a force syncs VOLATILE entries


async def append_all(writer: AsyncLogWriter, prefix: bytes) -> None:
    for i in range(5):
        await writer.append(prefix + b"%d" % i)


def records(*prefixes: bytes) -> list[bytes]:
    return [prefix + b"%d" % i for prefix in prefixes for i in range(5)]


async def read_everything(log: AsyncLog, count: int) -> list[bytes]:
    """Read ``count`` records from the start, failing if one does not come within 30 s."""
    async with await log.open_reader("earliest") as reader:
        got: list[bytes] = []
        for _ in range(count):
            record = await reader.read_next(timeout=30.0)
            assert record is not None, f"the reader stopped after {got!r}"
            got.append(record.data)
        return got


async def ledger_state(client: AsyncClient, ledger_id: int) -> tuple[str, int]:
    metadata = await client.ledger_metadata(ledger_id)
    return metadata.state, metadata.last_entry_id


async def written_then_bookies_stopped(
    six: tuple[LocalCluster, AsyncClient, AsyncLog], n: int
) -> tuple[AsyncLogWriter, int, list[str]]:
    """A writer that appended a0..a4 to its first ledger, after which ``n`` bookies of that
    ledger were stopped cleanly (they leave the registry): the writer, the ledger, those."""
    cluster, client, log = six
    writer = await log.open_writer()
    await append_all(writer, b"a")
    down = list((await client.ledger_metadata(writer.ledger_id)).last_ensemble)[:n]
    for bookie in down:
        cluster.stop(bookie)
    return writer, writer.ledger_id, down


def restart(cluster: LocalCluster, bookies: list[str]) -> None:
    for bookie in bookies:
        cluster.restart(bookie, wait=False)
    for bookie in bookies:
        cluster.wait_ready(bookie)


@pytest.fixture
async def six(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, AsyncClient, AsyncLog]]:
    """Six bookies (room for a ledger on three others while three are down) and a VOLATILE
    log with E = Qw = Qa = 3: with one bookie of a ledger down its close cannot force the
    acknowledged entries to Qa bookies and fails, while recovery (one bookie answering
    fences it) closes it and writes the entries back to replacements."""
    with LocalCluster(6, "sqlite", data_dir=tmp_path / "c", bookie_args=SLOW_FLUSH) as cluster:
        async with await walog.aio.connect(cluster.metadata_uri) as client:
            log = await client.open_log("roll-close", ack_quorum=3, durability=Durability.VOLATILE)
            yield cluster, client, log


async def test_a_roll_whose_old_ledger_cannot_be_closed_closes_it_by_recovery(
    six: tuple[LocalCluster, AsyncClient, AsyncLog],
) -> None:
    _, client, log = six
    writer, first, _ = await written_then_bookies_stopped(six, 1)

    await writer.roll()  # switched: the failed close does not make the roll fail
    assert writer.ledger_id != first
    await append_all(writer, b"b")

    async def closed_with_every_record() -> None:
        assert await ledger_state(client, first) == ("CLOSED", 4)
        assert [s.state for s in await log.segments()] == ["CLOSED", "OPEN"]

    await eventually(closed_with_every_record)
    await writer.close()  # (a VOLATILE ledger's readers see what its close forced)
    assert await read_everything(log, 10) == records(b"a", b"b")


async def test_a_ledger_that_cannot_be_recovered_yet_is_recovered_once_its_bookies_return(
    six: tuple[LocalCluster, AsyncClient, AsyncLog],
) -> None:
    cluster, client, log = six
    writer, first, down = await written_then_bookies_stopped(six, 3)
    await writer.roll()
    later = [writer.append_nowait(b"b%d" % i) for i in range(5)]
    await asyncio.sleep(1.0)
    assert (await ledger_state(client, first))[0] != "CLOSED"  # nothing answers to fence it
    # Until the old ledger's recovery says what of it is left, records after the roll wait:
    # in a VOLATILE log they could otherwise outlive earlier ones a crash took.
    assert not any(future.done() for future in later)

    restart(cluster, down)
    await asyncio.wait_for(asyncio.gather(*later), timeout=30.0)
    assert await ledger_state(client, first) == ("CLOSED", 4)
    await writer.close()
    assert await read_everything(log, 10) == records(b"a", b"b")


async def test_records_that_wait_too_long_for_a_ledger_to_be_recovered_fail_with_the_writer(
    six: tuple[LocalCluster, AsyncClient, AsyncLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = six[1]
    monkeypatch.setattr(walog.log.retire, "CLOSE_RECOVERY_SECONDS", 1.0)
    writer, first, _ = await written_then_bookies_stopped(six, 3)
    await writer.roll()
    later = writer.append_nowait(b"b0")  # waits for the first ledger, which nothing recovers
    with pytest.raises(WalogError, match=f"ledger {first} was not closed by recovery within 1 s"):
        await asyncio.wait_for(later, timeout=10.0)
    with pytest.raises(WalogError, match="was not closed by recovery"):
        await writer.append(b"b1")
    assert (await ledger_state(client, first))[0] != "CLOSED"  # left to the next takeover


async def left_open_third_from_the_end(
    six: tuple[LocalCluster, AsyncClient, AsyncLog], monkeypatch: pytest.MonkeyPatch
) -> int:
    """A log of three ledgers whose writer gave up on closing the first, holding a0..a4 (its
    bookies were down; they are back now): that first ledger's id."""
    cluster, _, log = six
    writer, first, down = await written_then_bookies_stopped(six, 3)
    later = []
    for prefix in (b"b", b"c"):  # two more ledgers: the first is not one of the last two
        await writer.roll()
        later += [writer.append_nowait(prefix + b"%d" % i) for i in range(5)]
    # Shortened only now: the records wait for the first ledger the default 30 s.
    monkeypatch.setattr(walog.log.retire, "CLOSE_RECOVERY_SECONDS", 1.0)
    with pytest.raises(WalogError, match=f"ledger {first} stays OPEN"):
        await writer.close()  # gave up on the first ledger after CLOSE_RECOVERY_SECONDS
    # The records after the rolls waited for the first ledger's close, and fail with it.
    for future in later:
        with pytest.raises(WalogError, match=f"ledger {first} stays OPEN"):
            future.result()
    assert [s.state for s in await log.segments()] == ["OPEN", "CLOSED", "OPEN"]
    restart(cluster, down)
    return first


async def test_a_takeover_recovers_every_ledger_the_list_shows_open_not_only_the_last_two(
    six: tuple[LocalCluster, AsyncClient, AsyncLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client, log = six
    first = await left_open_third_from_the_end(six, monkeypatch)
    await (await log.open_writer()).close()
    assert await ledger_state(client, first) == ("CLOSED", 4)
    assert await read_everything(log, 5) == records(b"a")


async def test_a_sink_commit_recovers_every_ledger_the_list_shows_open_like_a_takeover(
    six: tuple[LocalCluster, AsyncClient, AsyncLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client, log = six
    first = await left_open_third_from_the_end(six, monkeypatch)
    # A PERSISTENT sink ledger: its writer replaces a bookie whose channel is still backing
    # off after the restart.
    options = LedgerOptions()
    batch = SinkBatch(log.name, "txn-1", (), "etl", 1)
    sink = await client.create_ledger(custom_metadata=batch.tags())
    entry = encode_records([(0.0, b"d%d" % i) for i in range(5)])
    await sink.append(entry)
    await sink.close()
    linked = SinkBatch(log.name, "txn-1", (SinkLedger(sink.ledger_id, 0, len(entry)),), "etl", 1)

    assert await commit_sink_batch(client, linked, options)
    assert await ledger_state(client, first) == ("CLOSED", 4)
    assert await read_everything(log, 10) == records(b"a", b"d")

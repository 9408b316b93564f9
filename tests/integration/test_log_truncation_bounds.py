"""A truncation point past the log's end is refused by the library, on both APIs: the end is
just after the last entry readers see now (the log's record for a CLOSED last ledger, the
last add confirmed the bookies give any reader for an OPEN one), a point exactly there is
allowed, and a refused call leaves the log as usable as before."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

import walog
import walog.aio
from tests.integration.log_reads import read_exactly
from walog.aio import AsyncClient
from walog.log.position import Position, ledger_end, ledger_start
from walog.testing import LocalCluster

ENDS_AT = re.compile(r"the log now ends at entry (\d+):(\d+), so (\S+) is the furthest")


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


def _refusal(message: str, name: str, before: Position) -> tuple[Position, Position]:
    """The log's last entry and the furthest point a refusal of ``before`` names."""
    assert message.startswith(f"before: {before} is past the end of log {name!r}: "), message
    found = ENDS_AT.search(message)
    assert found is not None, message
    last = Position(int(found[1]), int(found[2]), 0)
    return last, Position.parse(found[3])


async def test_a_truncation_point_past_the_end_readers_see_is_refused_and_the_log_stays_usable(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    payloads = []
    for n in range(2):  # two closed ledgers, then the writer is on an open third
        for i in range(2):
            payloads.append(b"%d-%d" % (n, i))
            await writer.append(payloads[-1])
        await writer.roll()
    live = []
    for i in range(3):
        payloads.append(b"live-%d" % i)
        live.append(await writer.append(payloads[-1]))
    ids = [s.ledger_id for s in await log.segments()]
    assert len(ids) == 3
    stored = await log.metadata()
    acked_end = ledger_end(ids[-1], live[-1].entry_id)  # nothing a reader sees lies past it
    for past in (
        Position(acked_end.ledger_id, acked_end.entry_id, 1),
        Position(ids[-1], acked_end.entry_id + 50, 0),
        Position(ids[-1] + 1000, 0, 0),
    ):
        with pytest.raises(ValueError) as caught:
            await log.truncate(past)
        last, furthest = _refusal(str(caught.value), log_name, past)
        # Three adds in: the last two carried the LAC of the ones before them.
        assert last.ledger_id == ids[-1] and 1 <= last.entry_id <= live[-1].entry_id
        assert furthest == ledger_end(last.ledger_id, last.entry_id) <= acked_end < past
        assert await log.metadata() == stored  # nothing removed, nothing stored

    # The log goes on: the writer appends, a reader reads every record.
    payloads.append(b"after the refusal")
    await writer.append(payloads[-1])
    assert await read_exactly(log, len(payloads)) == payloads
    # The end a refusal names is a valid point: it removes every ledger but the open one.
    with pytest.raises(ValueError) as caught:
        await log.truncate(Position(ids[-1] + 1000, 0, 0))
    _, furthest = _refusal(str(caught.value), log_name, Position(ids[-1] + 1000, 0, 0))
    assert await log.truncate(furthest) == 2
    assert [s.ledger_id for s in await log.segments()] == ids[-1:]
    assert await read_exactly(log, 4) == payloads[-4:]

    # With no live writer the end is the last ledger's recorded end: exactly there is fine.
    await writer.close()
    final = (await log.metadata()).ledgers[-1]
    assert final.is_closed
    end = ledger_end(final.ledger_id, final.last_entry_id)
    just_past = Position(end.ledger_id, end.entry_id, 1)
    with pytest.raises(ValueError) as caught:
        await log.truncate(just_past)
    assert _refusal(str(caught.value), log_name, just_past) == (
        Position(final.ledger_id, final.last_entry_id, 0),
        end,
    )
    assert await log.truncate(end) == 0  # never the last ledger
    writer = await log.open_writer()
    await writer.append(b"next writer")
    await writer.close()
    assert await read_exactly(log, 5) == [*payloads[-4:], b"next writer"]


def test_the_sync_api_refuses_a_truncation_point_past_the_end_and_the_log_stays_usable(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        with log.open_writer() as writer:
            first = writer.append(b"a")
            writer.roll()
            second = writer.append(b"b")
            past = Position(second.ledger_id + 1000, 0, 0)
            stored = log.metadata()
            with pytest.raises(ValueError) as caught:
                log.truncate(past)
            last, furthest = _refusal(str(caught.value), log_name, past)
            # The one add of the open ledger is seen by readers, or not yet.
            assert last in (first.entry_start(), second.entry_start())
            assert ledger_start(second.ledger_id) <= furthest
            assert furthest <= ledger_end(second.ledger_id, second.entry_id)
            assert log.metadata() == stored
            with pytest.raises(ValueError, match="is past the end of log"):
                log.truncate(str(past))
            writer.append(b"c")
            with log.open_reader("earliest") as reader:
                got = [reader.read_next(timeout=30) for _ in range(3)]
                assert [r.data for r in got if r is not None] == [b"a", b"b", b"c"]
            assert log.truncate(furthest) == 1
            assert [s.ledger_id for s in log.segments()] == [second.ledger_id]
            assert first.ledger_id < second.ledger_id
            writer.append(b"d")
        with log.open_reader("earliest") as reader:
            got = [reader.read_next(timeout=30) for _ in range(3)]
            assert [r.data for r in got if r is not None] == [b"b", b"c", b"d"]
            assert reader.read_next(timeout=0.2) is None

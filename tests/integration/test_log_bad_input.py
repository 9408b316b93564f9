"""No caller can break a log: positions are checked before they are stored, and a stored
field that does not parse leaves the rest of the log usable until ``walog log repair``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

import walog
import walog.aio
from tests.integration.log_reads import read_exactly
from walog import main as cli
from walog.aio import AsyncClient
from walog.cli.status import gather
from walog.log.async_log import AsyncLog, delete_log
from walog.log.position import Position
from walog.log.retention import RetentionPolicy
from walog.log.truncation import enforce_retention
from walog.metadata.layout import log_path
from walog.testing import LocalCluster


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


async def _log_of_two_ledgers(client: AsyncClient, name: str) -> tuple[AsyncLog, list[bytes]]:
    """A log with records in two ledgers (the first closed) and its payloads in order."""
    log = await client.open_log(name)
    writer = await log.open_writer()
    for data in (b"a", b"b"):
        await writer.append(data)
    await writer.roll()
    await writer.append(b"c")
    await writer.close()
    return log, [b"a", b"b", b"c"]


async def _stored(client: AsyncClient, name: str) -> bytes:
    raw, _ = await client.ctx.store.get(log_path(name))
    return raw


BAD_CALLS: dict[str, tuple[Callable[[AsyncLog], Awaitable[object]], type[Exception], str]] = {
    "cursor-garbage": (
        lambda log: log.commit_cursor("x", "garbage"),
        ValueError,
        "position: bad position 'garbage'",
    ),
    "cursor-int": (
        lambda log: log.commit_cursor("c", 42),  # type: ignore[arg-type]
        TypeError,
        "position must be a walog.Position or text 'LEDGER:ENTRY:SLOT', got int 42",
    ),
    "cursor-name-int": (
        lambda log: log.commit_cursor(42, Position(0, 0, 0)),  # type: ignore[arg-type]
        TypeError,
        "consumer must be a str",
    ),
    "cursor-name-empty": (
        lambda log: log.commit_cursor("", Position(0, 0, 0)),
        ValueError,
        "consumer: the cursor name is empty",
    ),
    "cursor-past-the-end": (
        lambda log: log.commit_cursor("c", Position(10**9, 0, 0)),
        ValueError,
        "position: 1000000000:0:0 is past the end of log",
    ),
    "archived-int": (
        lambda log: log.mark_archived(42),  # type: ignore[arg-type]
        TypeError,
        "position must be a walog.Position",
    ),
    "archived-garbage": (
        lambda log: log.mark_archived("1:2"),
        ValueError,
        "position: bad position '1:2'",
    ),
    "archived-past-the-end": (
        lambda log: log.mark_archived(Position(10**9, 0, 0)),
        ValueError,
        "is past the end of log",
    ),
    "truncate-int": (
        lambda log: log.truncate(42),  # type: ignore[arg-type]
        TypeError,
        "before must be a walog.Position",
    ),
    "truncate-garbage": (
        lambda log: log.truncate("seven"),
        ValueError,
        "before: bad position 'seven'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
async def test_no_call_stores_a_position_that_is_not_one(
    client: AsyncClient, log_name: str, case: str
) -> None:
    call, error, words = BAD_CALLS[case]
    log, payloads = await _log_of_two_ledgers(client, log_name)
    before = await _stored(client, log_name)
    with pytest.raises(error) as caught:
        await call(log)
    assert words in str(caught.value)
    # Nothing stored, nothing lost, and the log is as usable as before.
    assert await _stored(client, log_name) == before
    assert await read_exactly(log, len(payloads)) == payloads
    writer = await log.open_writer()
    await writer.append(b"d")
    await writer.close()
    assert await read_exactly(log, 4) == [*payloads, b"d"]
    status = await gather(client, "test")
    assert status.problems == []


def test_the_sync_api_refuses_the_same_positions(cluster: LocalCluster, log_name: str) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        with log.open_writer() as writer:
            first = writer.append(b"a")
        with pytest.raises(ValueError, match="position: bad position 'garbage'"):
            log.commit_cursor("x", "garbage")
        with pytest.raises(TypeError, match=r"position must be a walog\.Position"):
            log.commit_cursor("c", 42)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"position must be a walog\.Position"):
            log.mark_archived(42)  # type: ignore[arg-type]
        # Text in the position's own form is a position.
        log.commit_cursor("c", str(first))
        log.mark_archived(str(first))
        meta = log.metadata()
        assert meta.cursors == {"c": first} and meta.archived_through == first
        assert meta.damaged == ()


async def _damage(client: AsyncClient, name: str) -> None:
    """Write fields that do not parse into the log's record, as a buggy or older program
    could, straight through the metadata store."""
    raw, version = await client.ctx.store.get(log_path(name))
    doc = json.loads(raw)
    doc["cursors"].update({"x": "garbage", "c": 42})
    doc["archived_through"] = 42
    await client.ctx.store.set(log_path(name), json.dumps(doc).encode(), version)


async def test_a_stored_field_that_does_not_parse_leaves_the_log_usable_until_repaired(
    client: AsyncClient,
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log, payloads = await _log_of_two_ledgers(client, log_name)
    first_ledger = (await log.segments())[0].ledger_id
    await log.commit_cursor("audit", Position(first_ledger, 0, 0))
    await _damage(client, log_name)

    meta = await log.metadata()
    assert sorted(d.name for d in meta.damaged) == [
        "archived_through",
        "cursors['c']",
        "cursors['x']",
    ]
    assert meta.cursors == {"audit": Position(first_ledger, 0, 0)}
    # Writers and readers work; a writer's CAS keeps what it could not read.
    writer = await log.open_writer()
    await writer.append(b"d")
    await writer.roll()
    await writer.close()
    assert await read_exactly(log, 4) == [*payloads, b"d"]
    assert json.loads(await _stored(client, log_name))["cursors"]["x"] == "garbage"
    # Retention cannot know what a damaged cursor protects: it deletes nothing.
    everything = RetentionPolicy(max_age=0.001)
    assert await enforce_retention(client, log_name, everything, now=2e9) == 0
    # walog status shows the whole cluster and names the field.
    problems = (await gather(client, "test")).problems
    assert any(f"log {log_name!r}: cursors['x'] = 'garbage'" in p for p in problems)
    assert any("walog log repair" in p for p in problems)

    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    assert cli.main(["log", "show", log_name]) == 0
    out = capsys.readouterr().out
    assert "DAMAGED: cursors['x'] = 'garbage' does not parse" in out
    assert f"'walog log repair {log_name}' removes it" in out
    assert cli.main(["log", "repair", log_name]) == 0
    out = capsys.readouterr().out
    assert "removed archived_through = 42" in out and "removed cursors['c'] = 42" in out

    meta = await log.metadata()
    assert meta.damaged == () and meta.cursors == {"audit": Position(first_ledger, 0, 0)}
    assert (await gather(client, "test")).problems == []
    assert await read_exactly(log, 4) == [*payloads, b"d"]
    # The good cursor alone holds retention now: the ledgers before it are kept.
    await log.commit_cursor("audit", None)
    assert await enforce_retention(client, log_name, everything, now=2e9) >= 1


async def test_delete_log_deletes_a_log_whose_record_has_a_field_that_does_not_parse(
    client: AsyncClient, log_name: str
) -> None:
    log, _ = await _log_of_two_ledgers(client, log_name)
    ledgers = [s.ledger_id for s in await log.segments()]
    await _damage(client, log_name)
    await delete_log(client, log_name)
    assert log_name not in await client.list_logs()
    for ledger_id in ledgers:
        with pytest.raises(walog.NoSuchLedgerError):
            await client.ledger_metadata(ledger_id)


async def test_a_truncated_position_is_refused_naming_the_first_record_that_exists(
    client: AsyncClient, log_name: str
) -> None:
    log, _ = await _log_of_two_ledgers(client, log_name)
    first, second = [s.ledger_id for s in await log.segments()]
    assert await log.truncate(Position(second, 0, 0)) == 1
    with pytest.raises(walog.DataLossError) as caught:
        await log.open_reader(Position(first, 0, 0))
    # Not "first:2:0" (one past the last truncated entry, which never held a record).
    assert f"the log now starts at {second}:0:0 " in str(caught.value)
    reader = await log.open_reader(Position(second, 0, 0))
    try:
        record = await reader.read_next(timeout=30)
    finally:
        await reader.close()
    assert record is not None and record.data == b"c"

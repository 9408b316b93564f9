"""Truncation, retention and orphan collection delete exactly the right whole ledgers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

import walog.aio
from walog.aio import AsyncClient
from walog.errors import NoSuchLedgerError
from walog.log.async_log import AsyncLog
from walog.log.ledgers import LOG_TAG
from walog.log.log_metadata import update_log
from walog.log.position import Position
from walog.log.retention import RetentionPolicy
from walog.log.truncation import enforce_retention
from walog.log.writer import AsyncLogWriter
from walog.testing import LocalCluster


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


async def fill(writer: AsyncLogWriter, ledgers: int, per_ledger: int = 2) -> list[Position]:
    """Write ``ledgers`` closed ledgers of records (then the writer is on a fresh one)."""
    out = []
    for n in range(ledgers):
        for i in range(per_ledger):
            out.append(await writer.append(b"%d-%d" % (n, i)))
        await writer.roll()
    return out


async def assert_deleted(client: AsyncClient, ledger_ids: list[int]) -> None:
    for ledger_id in ledger_ids:
        with pytest.raises(NoSuchLedgerError):
            await client.ledger_metadata(ledger_id)


async def test_truncate_deletes_exactly_the_ledgers_wholly_before(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    positions = await fill(writer, 3)
    ids = [s.ledger_id for s in await log.segments()]
    assert len(ids) == 4
    # Inside ledger 2 (its second record): only ledger 1 is wholly before.
    assert await log.truncate(positions[3]) == 1
    assert [s.ledger_id for s in await log.segments()] == ids[1:]
    await assert_deleted(client, ids[:1])
    assert (await client.ledger_metadata(ids[1])).ledger_id == ids[1]
    # At the start of the ledger being written: everything before it.
    assert await log.truncate(Position(ids[-1], 0, 0)) == 2
    assert [s.ledger_id for s in await log.segments()] == ids[-1:]
    await assert_deleted(client, ids[:3])
    assert (await log.metadata()).pending_deletion == ()
    await writer.append(b"still writable")
    await writer.close()


async def test_retention_by_age_honours_archive_mark_and_cursors(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    writer = await log.open_writer()
    await fill(writer, 3)
    ids = [s.ledger_id for s in await log.segments()]
    policy = RetentionPolicy(max_age=1.0, require_archived=True)
    later = time.time() + 3600
    name = log.name
    assert await enforce_retention(client, name, policy, now=later) == 0  # nothing archived
    await log.mark_archived(Position(ids[2], 0, 0))  # ledgers 0 and 1 archived
    await log.commit_cursor("billing", Position(ids[1], 1, 0))  # still inside ledger 1
    assert await enforce_retention(client, name, policy, now=later) == 1
    await assert_deleted(client, ids[:1])
    await log.commit_cursor("billing", Position(ids[3], 0, 0))
    assert await enforce_retention(client, name, policy, now=later) == 1
    assert [s.ledger_id for s in await log.segments()] == ids[2:]
    assert await enforce_retention(client, name, policy, now=time.time()) == 0
    await writer.close()


async def test_retention_by_size_measures_recovered_ledgers(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    first = await log.open_writer()
    for _ in range(4):
        await first.append(b"x" * 1000)
    await log.open_writer()  # takeover: the first ledger's size is unknown
    meta = await log.metadata()
    assert meta.ledgers[0].is_closed and meta.ledgers[0].size_bytes is None
    deleted = await enforce_retention(client, log.name, RetentionPolicy(max_bytes=1000))
    assert deleted == 1
    await assert_deleted(client, [meta.ledgers[0].ledger_id])


async def test_pending_deletions_are_collected_by_the_next_writer(
    client: AsyncClient, log_name: str
) -> None:
    log: AsyncLog = await client.open_log(log_name)
    writer = await log.open_writer()
    await fill(writer, 2)
    ids = [s.ledger_id for s in await log.segments()]
    await writer.close()
    # A truncation that crashed after its CAS: ledgers removed, not yet deleted.
    await update_log(
        client.ctx.store,
        log.name,
        lambda m: m.replace(ledgers=m.ledgers[2:], pending_deletion=tuple(ids[:2])),
    )
    assert (await client.ledger_metadata(ids[0])).ledger_id == ids[0]
    replacement = await log.open_writer()
    await assert_deleted(client, ids[:2])
    assert (await log.metadata()).pending_deletion == ()
    await replacement.close()


async def test_ledger_of_a_crashed_takeover_is_deleted_by_the_next_writer(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    # A writer created its ledger, then crashed before its CAS added it to the list.
    lost = await client.create_ledger(custom_metadata={LOG_TAG: log_name})
    unrelated = await client.create_ledger()
    writer = await log.open_writer()
    await assert_deleted(client, [lost.ledger_id])
    assert (await client.ledger_metadata(unrelated.ledger_id)).ledger_id == unrelated.ledger_id
    meta = await log.metadata()
    assert meta.orphans_scanned_below == writer.ledger_id
    await writer.close()
    await unrelated.close()

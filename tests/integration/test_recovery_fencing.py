"""Fencing and recovery against real bookie processes (seeds 000 and 002).

Partial writes (an entry on fewer bookies than its write set) are made with a second bookie
connection that adds entries directly, as a writer that crashed mid-add would have left them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import walog.aio as aio
from walog.config import ClientConfig, Timeouts
from walog.errors import LedgerFencedError, NoSuchEntryError, UnauthorizedError, WalogError
from walog.ledger.readops import write_set_bookies
from walog.ledger.recovery import recover
from walog.metadata.layout import LedgerMetadata
from walog.testing import LocalCluster
from walog.transport.network import NetworkBookiePool
from walog.wire.digest import entry_digest, master_key
from walog.wire.status import Status

KEY = master_key(b"")
FAST = ClientConfig(timeouts=Timeouts(add=2.0, read=1.0))


@pytest.fixture
async def raw() -> AsyncIterator[NetworkBookiePool]:
    """A bare bookie connection for partial writes and per-bookie reads."""
    pool = NetworkBookiePool(FAST)
    yield pool
    await pool.close()


async def _partial_add(
    pool: NetworkBookiePool, bookies: list[str], md: LedgerMetadata, entry_id: int, lac: int
) -> None:
    data = f"entry-{entry_id}".encode()
    digest = entry_digest(md.ledger_id, entry_id, lac, data)
    for bookie in bookies:
        reply = await pool.get(bookie).add(md.ledger_id, entry_id, lac, data, digest, KEY)
        assert reply.status is Status.OK, (bookie, reply)


async def _holds(pool: NetworkBookiePool, bookie: str, ledger_id: int, entry_id: int) -> bool:
    reply = await pool.get(bookie).read(ledger_id, entry_id, entry_id)
    return reply.status is Status.OK and any(e.entry_id == entry_id for e in reply.entries)


async def _append(writer: Any, count: int) -> None:
    for i in range(count):
        await writer.append(f"entry-{i}".encode())


async def test_fencing_example_of_seed_002(
    any_cluster: LocalCluster, raw: NetworkBookiePool
) -> None:
    """Writer acked 0..11, wrote 12 partially; recovery reads 12, writes it back to its whole
    write quorum, finds 13 absent and closes at 12; the writer's next add is fenced."""
    async with await aio.connect(any_cluster.metadata_uri, config=FAST) as client:
        # E=3, Qw=2; Qa=1 makes one copy of entry 12 possibly acknowledged, so it must be kept.
        writer = await client.create_ledger(3, 2, 1)
        await _append(writer, 12)
        assert writer.last_add_confirmed == 11
        md = writer.metadata
        write_set_12 = write_set_bookies(md, 12)
        await _partial_add(raw, write_set_12[:1], md, 12, lac=11)

        async with await aio.connect(any_cluster.metadata_uri, config=FAST) as other:
            reader = await other.open_ledger(writer.ledger_id, recovery=True)
            assert reader.is_closed
            assert reader.last_add_confirmed == 12
            assert [e.data for e in await reader.read(11, 12)] == [b"entry-11", b"entry-12"]
            for bookie in write_set_12:  # written back to the whole write quorum
                assert await _holds(raw, bookie, md.ledger_id, 12), bookie
            with pytest.raises(NoSuchEntryError):
                await reader.read(12, 13)

        with pytest.raises(LedgerFencedError):
            await writer.append(b"too late")
        # The writer confirmed 11 but the ledger was closed at 12: its close must fail.
        with pytest.raises(LedgerFencedError):
            await writer.close()


async def test_writer_close_after_recovery_at_its_own_lac_succeeds(cluster: LocalCluster) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        await _append(writer, 5)
        closed, _ = await recover(client.ctx, writer.ledger_id, KEY)
        assert closed.last_entry_id == 4
        await writer.close()  # CLOSED with the writer's own last entry: success (seed 000)


async def test_fence_flag_on_recovery_reads_a_read_alone_rejects_the_writer(
    cluster: LocalCluster, raw: NetworkBookiePool
) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        await _append(writer, 3)
        for bookie in writer.metadata.last_ensemble:
            reply = await raw.get(bookie).read(writer.ledger_id, 3, 3, fence=True, master_key=KEY)
            assert reply.status in (Status.OK, Status.NO_SUCH_ENTRY)
            assert reply.fenced
        with pytest.raises(LedgerFencedError):
            await writer.append(b"after a recovery read")


async def test_concurrent_recoverers_agree_on_the_last_entry(
    any_cluster: LocalCluster, raw: NetworkBookiePool
) -> None:
    async with await aio.connect(any_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        await _append(writer, 20)
        md = writer.metadata
        # In-flight tail: 20 on two bookies (possibly acknowledged), 21 on one.
        await _partial_add(raw, list(md.last_ensemble[:2]), md, 20, lac=19)
        await _partial_add(raw, list(md.last_ensemble[2:]), md, 21, lac=19)

        clients = [await aio.connect(any_cluster.metadata_uri, config=FAST) for _ in range(3)]
        try:
            results = await asyncio.gather(
                *(recover(c.ctx, writer.ledger_id, KEY) for c in clients)
            )
        finally:
            for c in clients:
                await c.close()
        lasts = {closed.last_entry_id for closed, _ in results}
        assert len(lasts) == 1, lasts
        final = await client.ledger_metadata(writer.ledger_id)
        assert final.state == "CLOSED"
        assert final.last_entry_id in lasts
        assert final.last_entry_id >= 20  # entry 20 reached an ack quorum: never truncated


async def test_recovery_with_a_wrong_master_key_is_unauthorized(cluster: LocalCluster) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2, password=b"secret")
        await writer.append(b"x")
        with pytest.raises(UnauthorizedError):
            await recover(client.ctx, writer.ledger_id, master_key(b"not the password"))
        await writer.append(b"still writable")


async def test_paused_bookie_during_recovery_does_not_truncate(
    fresh_cluster: LocalCluster,
) -> None:
    """Qw=3, Qa=2: one frozen bookie leaves an answer quorum; every acked entry survives."""
    async with await aio.connect(fresh_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        await _append(writer, 30)
        fresh_cluster.pause(0)
        try:
            closed, _ = await recover(client.ctx, writer.ledger_id, KEY)
            assert closed.last_entry_id == 29
            reader = await client.open_ledger(writer.ledger_id)
            assert len(await reader.read(0, 29)) == 30
        finally:
            fresh_cluster.resume(0)


async def test_unknown_is_not_absent_recovery_waits_for_a_paused_bookie(
    fresh_cluster: LocalCluster, raw: NetworkBookiePool
) -> None:
    """Qa=1: entry 10 may be acknowledged by its only holder, which is frozen. Recovery must
    not close short of it: it waits (timeouts are unknown answers) until the bookie returns."""
    async with await aio.connect(fresh_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 1)
        await _append(writer, 10)
        md = writer.metadata
        holder = md.last_ensemble[0]
        await _partial_add(raw, [holder], md, 10, lac=9)
        fresh_cluster.pause(holder)
        try:
            task = asyncio.ensure_future(recover(client.ctx, writer.ledger_id, KEY))
            done, _ = await asyncio.wait({task}, timeout=3.0)
            assert not done, "recovery concluded while a possible holder of entry 10 was silent"
        finally:
            fresh_cluster.resume(holder)
        closed, _ = await asyncio.wait_for(task, 60)
        assert closed.last_entry_id == 10


async def test_recovery_start_point_in_a_multi_fragment_ledger(
    fresh_cluster: LocalCluster,
) -> None:
    """After an ensemble change at entry N the new fragment's bookies know nothing before N;
    recovery starts at N-1 at the earliest and never re-reads the earlier fragment."""
    fresh_cluster.add_bookie()
    async with await aio.connect(fresh_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        await _append(writer, 10)
        lost = writer.metadata.last_ensemble[1]
        fresh_cluster.kill(lost)
        for i in range(10, 15):
            await writer.append(f"entry-{i}".encode())
        md = writer.metadata
        assert len(md.ensembles) == 2 and lost not in md.last_ensemble
        # Only the killed bookie is outside the last fragment; the earlier fragment still
        # has two live copies of each entry, but recovery must not need to ask it anything.
        closed, _ = await recover(client.ctx, writer.ledger_id, KEY)
        assert closed.last_entry_id == 14
        assert closed.ensembles == md.ensembles
        reader = await client.open_ledger(writer.ledger_id)
        assert [e.data for e in await reader.read(0, 14)] == [
            f"entry-{i}".encode() for i in range(15)
        ]


async def test_writer_ensemble_change_racing_recovery_loses_no_acked_entry(
    fresh_cluster: LocalCluster,
) -> None:
    fresh_cluster.add_bookie()
    async with await aio.connect(fresh_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        acked: list[int] = []
        twenty_acked = asyncio.Event()

        async def keep_appending() -> WalogError | None:
            for i in range(100_000):
                try:
                    acked.append(await writer.append(f"entry-{i}".encode()))
                except WalogError as exc:
                    return exc
                if len(acked) == 20:
                    twenty_acked.set()
            return None

        appender = asyncio.ensure_future(keep_appending())
        await asyncio.wait_for(twenty_acked.wait(), 30)
        # A bookie dies (the writer changes its ensemble) while a reader recovers.
        fresh_cluster.kill(writer.metadata.last_ensemble[0])
        async with await aio.connect(fresh_cluster.metadata_uri, config=FAST) as other:
            closed, _ = await recover(other.ctx, writer.ledger_id, KEY)
            error = await asyncio.wait_for(appender, 60)
            assert isinstance(error, LedgerFencedError), error
            assert acked and max(acked) <= closed.last_entry_id
            reader = await other.open_ledger(writer.ledger_id)
            entries = await reader.read(0, closed.last_entry_id)
            assert [e.entry_id for e in entries] == list(range(closed.last_entry_id + 1))


async def test_closed_ledger_is_never_read_past_its_last_entry(
    cluster: LocalCluster, raw: NetworkBookiePool
) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        await _append(writer, 4)
        closed, _ = await recover(client.ctx, writer.ledger_id, KEY)
        assert closed.last_entry_id == 3
        # A stray entry past the end (recovery writes pass the fence) must stay invisible.
        stray = b"stray"
        for bookie in closed.last_ensemble:
            reply = await raw.get(bookie).add(
                closed.ledger_id,
                4,
                3,
                stray,
                entry_digest(closed.ledger_id, 4, 3, stray),
                KEY,
                recovery=True,
            )
            assert reply.status is Status.OK
        reader = await client.open_ledger(writer.ledger_id, recovery=False)
        assert reader.is_closed and reader.last_add_confirmed == 3
        with pytest.raises(NoSuchEntryError):
            await reader.read(0, 4)
        assert [e.entry_id for e in await reader.read_unconfirmed(2, 10)] == [2, 3]
        assert await reader.read_last_add_confirmed() == 3

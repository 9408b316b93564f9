"""Readers without recovery against real bookie processes: LAC-bounded reads, unconfirmed
reads, LAC reads and long-poll tailing (seed 002 "Using fencing", seed 004 read bounds)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import walog.aio as aio
from walog.config import ClientConfig, Timeouts
from walog.errors import NoSuchEntryError
from walog.ledger.lacwatch import BACKUP_INTERVAL_S, WATCH_HEARTBEAT_S
from walog.ledger.readops import write_set_bookies
from walog.testing import LocalCluster
from walog.transport.base import ReadReply
from walog.transport.network import NetworkBookiePool
from walog.wire.digest import entry_digest, master_key
from walog.wire.status import Status

KEY = master_key(b"")
FAST = ClientConfig(timeouts=Timeouts(add=2.0, read=1.0))
PROMPT_S = 3.0
"""Loose bound for a long poll to report an append (the writer's explicit LAC follows an
append within ~0.1 s; the machine is shared, so leave plenty of room)."""


@pytest.fixture
async def raw() -> AsyncIterator[NetworkBookiePool]:
    """A bare bookie connection for partial writes and per-bookie checks."""
    pool = NetworkBookiePool(FAST)
    yield pool
    await pool.close()


@pytest.mark.parametrize(("ensemble", "write_quorum"), [(3, 3), (3, 2)])
async def test_reads_return_every_entry_in_order_striped_or_not(
    cluster: LocalCluster, ensemble: int, write_quorum: int
) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(ensemble, write_quorum, 2)
        for i in range(50):
            writer.append_nowait(f"entry-{i}".encode())
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id)
        entries = await reader.read(0, 49)
        assert [e.entry_id for e in entries] == list(range(50))
        assert entries[17].data == b"entry-17" and entries[17].ledger_id == writer.ledger_id
        assert [e.entry_id for e in await reader.read(48, 49)] == [48, 49]
        with pytest.raises(ValueError, match="invalid entry range"):
            await reader.read(5, 4)


async def test_no_recovery_open_never_fences(cluster: LocalCluster, raw: NetworkBookiePool) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        for i in range(5):
            await writer.append(f"entry-{i}".encode())
        async with await aio.connect(cluster.metadata_uri, config=FAST) as other:
            reader = await other.open_ledger(writer.ledger_id, recovery=False)
            assert not reader.is_closed
            assert await reader.read_last_add_confirmed() >= 3
            assert len(await reader.read(0, 3)) == 4
            await reader.wait_last_add_confirmed(reader.last_add_confirmed, 0.2)
            await reader.close()
        assert await writer.append(b"still writing") == 5
        md = await client.ledger_metadata(writer.ledger_id)
        assert md.state == "OPEN"
        for bookie in md.last_ensemble:
            reply = await raw.get(bookie).read(writer.ledger_id, 0, 0)
            assert reply.status is Status.OK and not reply.fenced, bookie
        await writer.close()


async def test_reads_are_bounded_by_the_lac_unconfirmed_reads_are_not(
    cluster: LocalCluster, raw: NetworkBookiePool
) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        for i in range(4):
            await writer.append(f"entry-{i}".encode())
        md = writer.metadata
        # Entry 4 sent by the writer but acknowledged by nobody yet: past every LAC.
        data = b"entry-4"
        for bookie in write_set_bookies(md, 4)[:1]:
            reply = await raw.get(bookie).add(
                md.ledger_id, 4, 3, data, entry_digest(md.ledger_id, 4, 3, data), KEY
            )
            assert reply.status is Status.OK
        reader = await client.open_ledger(writer.ledger_id, recovery=False)
        # Entry 3 carries LAC 2; the writer's idle LAC update brings 3 shortly after.
        assert await reader.wait_last_add_confirmed(2, 30.0) == 3
        assert await reader.read_last_add_confirmed() == 3
        with pytest.raises(NoSuchEntryError, match="last add confirmed is 3"):
            await reader.read(0, 4)
        unconfirmed = await reader.read_unconfirmed(2, 9)
        assert [e.entry_id for e in unconfirmed] == [2, 3, 4]
        assert unconfirmed[-1].data == b"entry-4"
        with pytest.raises(NoSuchEntryError):
            await reader.read_unconfirmed(5, 9)
        await reader.close()


async def test_long_poll_returns_promptly_after_each_append(any_cluster: LocalCluster) -> None:
    async with await aio.connect(any_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        async with await aio.connect(any_cluster.metadata_uri, config=FAST) as other:
            reader = await other.open_ledger(writer.ledger_id, recovery=False)
            loop = asyncio.get_running_loop()
            seen: list[bytes] = []
            lac = reader.last_add_confirmed
            for i in range(5):
                waiting = asyncio.ensure_future(reader.wait_last_add_confirmed(lac, 30.0))
                started = loop.time()
                entry_id = await writer.append(f"entry-{i}".encode())
                new_lac = await waiting
                assert loop.time() - started < PROMPT_S
                assert new_lac >= entry_id
                seen.extend(e.data for e in await reader.read(lac + 1, new_lac))
                lac = new_lac
            assert seen == [f"entry-{i}".encode() for i in range(5)]
            await reader.close()
        await writer.close()


async def test_long_poll_returns_the_current_lac_at_the_timeout(cluster: LocalCluster) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        await writer.append(b"only")
        reader = await client.open_ledger(writer.ledger_id, recovery=False)
        # Entry 0 carries LAC -1; the writer's explicit LAC makes 0 visible shortly after.
        lac = await reader.wait_last_add_confirmed(-1, 30.0)
        assert lac == 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await reader.wait_last_add_confirmed(lac, 0.5) == lac
        assert 0.4 <= loop.time() - started < 0.5 + PROMPT_S
        await reader.close()
        await writer.close()


async def test_tailer_notices_the_close_and_takes_the_last_entry(
    any_cluster: LocalCluster,
) -> None:
    async with await aio.connect(any_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        for i in range(3):
            await writer.append(f"entry-{i}".encode())
        async with await aio.connect(any_cluster.metadata_uri, config=FAST) as other:
            reader = await other.open_ledger(writer.ledger_id, recovery=False)
            # Wait past anything that will ever exist: only the close can end this early.
            waiting = asyncio.ensure_future(reader.wait_last_add_confirmed(10, 60.0))
            await writer.close()
            assert await asyncio.wait_for(waiting, 30) == 2
            assert reader.is_closed and reader.last_add_confirmed == 2
            assert len(await reader.read(0, 2)) == 3


async def test_tailer_follows_an_ensemble_change(fresh_cluster: LocalCluster) -> None:
    fresh_cluster.add_bookie()
    async with await aio.connect(fresh_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        for i in range(5):
            await writer.append(f"entry-{i}".encode())
        async with await aio.connect(fresh_cluster.metadata_uri, config=FAST) as other:
            reader = await other.open_ledger(writer.ledger_id, recovery=False)
            lac = await reader.read_last_add_confirmed()
            fresh_cluster.kill(writer.metadata.last_ensemble[0])
            for i in range(5, 10):
                await writer.append(f"entry-{i}".encode())
            assert len(writer.metadata.ensembles) == 2
            while lac < 9:
                lac = await reader.wait_last_add_confirmed(lac, 30.0)
            assert len(reader.metadata.ensembles) == 2
            assert [e.data for e in await reader.read(0, 9)] == [
                f"entry-{i}".encode() for i in range(10)
            ]
            await reader.close()
        await writer.close()


@pytest.mark.parametrize("position", [0, 1, 2])
async def test_a_frozen_bookie_of_the_write_set_does_not_hold_a_tailer_back(
    fresh_cluster: LocalCluster, position: int
) -> None:
    # The tailer would take heartbeat + 30 s to give up on a silent bookie: only the
    # watches on the other bookies of the write set can bring the LAC in time.
    patient = ClientConfig(timeouts=Timeouts(add=2.0, read=30.0))
    async with await aio.connect(fresh_cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)
        async with await aio.connect(fresh_cluster.metadata_uri, config=patient) as other:
            reader = await other.open_ledger(writer.ledger_id, recovery=False)
            waiting = asyncio.ensure_future(reader.wait_last_add_confirmed(-1, 60.0))
            await writer.append(b"entry-0")
            assert await asyncio.wait_for(waiting, 60) == 0
            # Frozen, a bookie neither answers nor sends heartbeats (its connection stays
            # open); the writer goes on with the other two.
            frozen = reader.metadata.last_ensemble[position]
            fresh_cluster.pause(frozen)
            try:
                for i in range(1, 4):
                    await writer.append(f"entry-{i}".encode())
                lac = 0
                while lac < 3:
                    lac = await asyncio.wait_for(reader.wait_last_add_confirmed(lac, 60.0), 10)
                assert [e.data for e in await reader.read(0, 3)] == [
                    f"entry-{i}".encode() for i in range(4)
                ]
                # A frozen lead hands over (20 ms after the backup told news); the watch
                # has no event to wait on, so poll it, bounded.
                async with asyncio.timeout(5):
                    while reader._lac_watch.lead == frozen:  # noqa: ASYNC110
                        await asyncio.sleep(0.01)
            finally:
                fresh_cluster.resume(frozen)
            await reader.close()
        await writer.close()


async def test_the_lead_watch_tells_every_lac_and_the_backup_only_every_backup_interval(
    cluster: LocalCluster,
) -> None:
    async with await aio.connect(cluster.metadata_uri, config=FAST) as client:
        writer = await client.create_ledger(3, 3, 2)  # Qw - Qa + 1 = 2 watches
        reader = await client.open_ledger(writer.ledger_id, recovery=False)
        told: dict[str, list[int]] = {}
        take_lac = reader._lac_watch._on_reply

        def count(bookie: str, reply: ReadReply) -> None:
            told.setdefault(bookie, []).append(reply.lac)
            take_lac(bookie, reply)

        reader._lac_watch._on_reply = count
        waiting = asyncio.ensure_future(reader.wait_last_add_confirmed(-1, 60.0))
        await writer.append(b"first")
        assert await asyncio.wait_for(waiting, 30) == 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        lac = 0
        for i in range(1, 61):
            await writer.append(b"entry %d" % i)
            await asyncio.sleep(0.005)
            lac = await reader.wait_last_add_confirmed(lac, 10.0)
        while lac < 60:
            lac = await reader.wait_last_add_confirmed(lac, 10.0)
        elapsed = loop.time() - started
        lead = reader._lac_watch.lead
        assert lead is not None and len(told) == 2
        (backup,) = set(told) - {lead}
        # LAC n is told when entry n + 1 arrives (or by an explicit LAC): the lead tells
        # nearly each one; the backup at most once per BACKUP_INTERVAL_S, with heartbeats.
        assert len(told[lead]) >= 40
        assert len(told[backup]) <= elapsed / BACKUP_INTERVAL_S + 5
        # Heartbeats of an idle ledger (every WATCH_HEARTBEAT_S) are no news: no lead moves.
        heard = len(told[backup])
        assert await reader.wait_last_add_confirmed(lac, 2.5 * WATCH_HEARTBEAT_S) == lac
        assert len(told[backup]) > heard and reader._lac_watch.lead == lead
        await reader.close()
        await writer.close()

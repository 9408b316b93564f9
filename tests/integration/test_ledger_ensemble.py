"""Striping and ensemble changes against real bookie processes (seed 000, "Write quorums",
"Writing to ledgers"). Each test has a cluster of its own: it kills bookies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import walog.aio as aio
from tests.integration.waiting import eventually
from walog.config import ClientConfig, Timeouts
from walog.errors import BookieUnavailableError, NotEnoughBookiesError
from walog.testing import LocalCluster
from walog.wire.durability import Durability
from walog.wire.status import Status

CONFIG = ClientConfig(timeouts=Timeouts(add=5.0, read=5.0))


@pytest.fixture
async def client(fresh_cluster: LocalCluster) -> AsyncIterator[aio.AsyncClient]:
    async with await aio.connect(fresh_cluster.metadata_uri, config=CONFIG) as c:
        yield c


async def _holders(
    client: aio.AsyncClient, bookies: tuple[str, ...], ledger_id: int, entry_id: int
) -> set[int]:
    """Ensemble indexes of the bookies that hold the entry (raw per-bookie reads)."""
    held = set()
    for index, bookie in enumerate(bookies):
        reply = await client.ctx.pool.get(bookie).read(ledger_id, entry_id, entry_id)
        if reply.status is Status.OK and reply.entries:
            held.add(index)
    return held


async def test_entries_are_striped_over_write_quorums_as_in_seed_000(
    fresh_cluster: LocalCluster, client: aio.AsyncClient
) -> None:
    fresh_cluster.add_bookie()
    writer = await client.create_ledger(4, 3, 2)
    await asyncio.gather(*(writer.append_nowait(b"%d" % i) for i in range(6)))
    await writer.close()
    ensemble = writer.metadata.last_ensemble
    b1, b2, b3, b4 = range(4)
    table = {
        0: {b1, b2, b3},
        1: {b2, b3, b4},
        2: {b3, b4, b1},
        3: {b4, b1, b2},
        4: {b1, b2, b3},
        5: {b2, b3, b4},
    }

    async def check() -> None:
        for entry_id, quorum in table.items():
            held = await _holders(client, ensemble, writer.ledger_id, entry_id)
            assert held == quorum, f"entry {entry_id}: held by {held}, write quorum {quorum}"

    await eventually(check)


@pytest.mark.parametrize("ack_quorum", [2, 3])
async def test_killed_bookie_is_replaced_and_no_acked_entry_is_lost(
    fresh_cluster: LocalCluster, client: aio.AsyncClient, ack_quorum: int
) -> None:
    # With Qa = 3 nothing completes without the replacement: the entries pending at the
    # change must be resent to it.
    fresh_cluster.add_bookie()
    writer = await client.create_ledger(3, 3, ack_quorum)
    first = writer.metadata.last_ensemble
    (spare,) = set(fresh_cluster.bookie_ids) - set(first)
    victim = first[0]
    acked: list[int] = []
    killed = asyncio.Event()

    async def write() -> None:
        for batch in range(30):
            futures = [writer.append_nowait(b"entry-%d-%d" % (batch, i)) for i in range(20)]
            if batch == 10:
                fresh_cluster.kill(victim)  # mid-stream: adds of this batch are in flight
                killed.set()
            acked.extend(await asyncio.wait_for(asyncio.gather(*futures), timeout=60))

    await write()
    assert killed.is_set()
    await writer.close()
    assert acked == list(range(600))

    metadata = await client.ledger_metadata(writer.ledger_id)
    assert metadata.last_entry_id == 599
    assert len(metadata.ensembles) == 2
    change_at, ensemble = metadata.ensembles[-1]
    assert 0 < change_at <= 220
    assert ensemble == tuple(spare if b == victim else b for b in first)
    replacement = spare

    async def check() -> None:
        # Every entry of the new fragment reached its whole write quorum, the replacement
        # included (pending entries were resent to it).
        for entry_id in range(change_at, 600, 37):
            held = await _holders(client, ensemble, writer.ledger_id, entry_id)
            assert held == {0, 1, 2}, f"entry {entry_id} held by {held}"

    await eventually(check)
    reply = await client.ctx.pool.get(replacement).read(writer.ledger_id, change_at, 599)
    assert reply.status is Status.OK
    assert len(reply.entries) == 600 - change_at

    reader = await client.open_ledger(writer.ledger_id, recovery=False)
    entries = await reader.read(0, 599)
    assert [e.data for e in entries] == [b"entry-%d-%d" % (i // 20, i % 20) for i in range(600)]


async def test_without_a_replacement_writes_go_on_while_ack_quorum_is_reachable(
    fresh_cluster: LocalCluster, client: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    await writer.append(b"before")
    ensemble = writer.metadata.last_ensemble
    fresh_cluster.kill(ensemble[0])
    assert await asyncio.gather(*(writer.append_nowait(b"x") for _ in range(20))) == list(
        range(1, 21)
    )
    assert len((await client.ledger_metadata(writer.ledger_id)).ensembles) == 1

    fresh_cluster.kill(ensemble[1])
    with pytest.raises(NotEnoughBookiesError, match="ack_quorum=2 can no longer be reached"):
        for _ in range(50):
            await writer.append(b"y")
    with pytest.raises(NotEnoughBookiesError):
        writer.append_nowait(b"z")
    await writer.close()
    assert (await client.ledger_metadata(writer.ledger_id)).last_entry_id == 20


async def test_volatile_ledger_never_changes_its_ensemble(
    fresh_cluster: LocalCluster, client: aio.AsyncClient
) -> None:
    fresh_cluster.add_bookie()
    writer = await client.create_ledger(3, 3, 2, durability=Durability.VOLATILE)
    await writer.append(b"a")
    fresh_cluster.kill(writer.metadata.last_ensemble[2])
    with pytest.raises(BookieUnavailableError, match="VOLATILE"):
        for _ in range(50):
            await writer.append(b"b")
    assert len((await client.ledger_metadata(writer.ledger_id)).ensembles) == 1


async def test_unresponsive_bookie_is_replaced_after_the_add_timeout(
    fresh_cluster: LocalCluster,
) -> None:
    fresh_cluster.add_bookie()
    config = ClientConfig(timeouts=Timeouts(add=1.0, read=5.0))
    async with await aio.connect(fresh_cluster.metadata_uri, config=config) as client:
        # Qa = Qw: no entry can complete while one bookie of the ensemble is frozen.
        writer = await client.create_ledger(3, 3, 3)
        await writer.append(b"before")
        frozen = writer.metadata.last_ensemble[1]
        fresh_cluster.pause(frozen)
        try:
            assert await asyncio.wait_for(writer.append(b"after"), timeout=30) == 1
        finally:
            fresh_cluster.resume(frozen)
        metadata = await client.ledger_metadata(writer.ledger_id)
        assert [first for first, _ in metadata.ensembles] == [0, 1]
        assert frozen not in metadata.ensembles[-1][1]
        await writer.close()


async def test_pending_entries_reach_a_bookie_that_replaces_an_unreplaceable_index(
    fresh_cluster: LocalCluster, client: aio.AsyncClient
) -> None:
    # E = Qw = 3, Qa = 2, one spare. Two bookies die at once: the first ensemble change
    # has one candidate, so one index stays without a replacement (writes go on with Qa
    # = 2). A new bookie joins, then a third ensemble bookie dies: the second change puts
    # the new bookie at the index left without a replacement (the lowest failed index),
    # and the entries pending at that moment reach Qa only once they are sent to it.
    fresh_cluster.add_bookie()
    writer = await client.create_ledger(3, 3, 2)
    first = writer.metadata.last_ensemble
    acked: list[int] = []

    async def batch(number: int, kill: tuple[str, ...] = ()) -> None:
        futures = [writer.append_nowait(b"entry-%d-%d" % (number, i)) for i in range(20)]
        for victim in kill:
            fresh_cluster.kill(victim)  # adds of this batch are in flight
        acked.extend(await asyncio.wait_for(asyncio.gather(*futures), timeout=60))

    await batch(0)
    await batch(1, kill=first[:2])
    await batch(2)
    second = writer.metadata.last_ensemble
    assert len(writer.metadata.ensembles) >= 2
    assert set(second) & set(first[:2]), "both failed indexes were replaced"
    joined = fresh_cluster.add_bookie()
    await batch(3, kill=first[2:])
    await batch(4)
    await writer.close()
    assert acked == list(range(100))

    metadata = await client.ledger_metadata(writer.ledger_id)
    assert metadata.last_entry_id == 99
    last_start, last_ensemble = metadata.ensembles[-1]
    assert joined in last_ensemble
    assert 40 <= last_start <= 80
    reply = await client.ctx.pool.get(joined).read(writer.ledger_id, last_start, 99)
    assert reply.status is Status.OK
    assert [e.entry_id for e in reply.entries] == list(range(last_start, 100))
    # Every bookie of the first fragment is dead; the later fragments stay readable.
    start = metadata.ensembles[1][0]
    reader = await client.open_ledger(writer.ledger_id, recovery=False)
    entries = await reader.read(start, 99)
    expected = [b"entry-%d-%d" % (i // 20, i % 20) for i in range(start, 100)]
    assert [e.data for e in entries] == expected


async def test_an_unreplaceable_index_is_replaced_once_a_bookie_is_available_again(
    fresh_cluster: LocalCluster, client: aio.AsyncClient
) -> None:
    # Three bookies, E = Qw = 3, Qa = 2: a dead one cannot be replaced, writes go on with
    # two copies. When a bookie joins, the writer moves to it without another failure.
    writer = await client.create_ledger(3, 3, 2)
    await writer.append(b"before")
    dead = writer.metadata.last_ensemble[0]
    fresh_cluster.kill(dead)
    await writer.append(b"with two copies")
    joined = fresh_cluster.add_bookie()

    async def moved() -> None:
        await writer.append(b"after")
        assert joined in writer.metadata.last_ensemble

    await eventually(moved)
    metadata = await client.ledger_metadata(writer.ledger_id)
    _, last_ensemble = metadata.ensembles[-1]
    assert dead not in last_ensemble and joined in last_ensemble
    entry = await writer.append(b"three copies again")

    async def three_copies() -> None:  # the third may still be in flight after the ack
        assert await _holders(client, last_ensemble, writer.ledger_id, entry) == {0, 1, 2}

    await eventually(three_copies)
    await writer.close()

"""The write path against real bookie processes (seed 000 "Writing to ledgers", "Closing a
ledger as a writer"; seed 004 for VOLATILE ledgers)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

import walog.aio as aio
from walog.config import ClientConfig, Timeouts
from walog.errors import (
    LedgerClosedError,
    LedgerFencedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedError,
)
from walog.testing import LocalCluster
from walog.wire.durability import Durability
from walog.wire.status import Status

CONFIG = ClientConfig(timeouts=Timeouts(add=5.0, read=5.0, explicit_lac=0.05), max_entry_bytes=1000)


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[aio.AsyncClient]:
    async with await aio.connect(cluster.metadata_uri, config=CONFIG) as c:
        yield c


@pytest.fixture
async def other(cluster: LocalCluster) -> AsyncIterator[aio.AsyncClient]:
    """A second client: a reader, a recoverer or a concurrent metadata writer."""
    async with await aio.connect(cluster.metadata_uri, config=CONFIG) as c:
        yield c


async def test_entry_ids_are_sequential_and_complete_in_order(client: aio.AsyncClient) -> None:
    writer = await client.create_ledger(3, 3, 2)
    order: list[int] = []
    futures = [writer.append_nowait(b"e%d" % i) for i in range(300)]
    for future in futures:
        future.add_done_callback(lambda f: order.append(f.result()))
    assert await asyncio.gather(*futures) == list(range(300))
    assert order == list(range(300))
    assert writer.last_add_confirmed == 299
    await writer.close()
    metadata = await client.ledger_metadata(writer.ledger_id)
    assert (metadata.state, metadata.last_entry_id) == ("CLOSED", 299)
    reader = await client.open_ledger(writer.ledger_id)
    assert [e.data for e in await reader.read(0, 299)] == [b"e%d" % i for i in range(300)]


async def test_each_entry_carries_the_writers_lac(client: aio.AsyncClient) -> None:
    writer = await client.create_ledger(3, 3, 3)
    for i in range(3):
        await writer.append(b"x%d" % i)
    bookie = writer.metadata.last_ensemble[0]
    reply = await client.ctx.pool.get(bookie).read(writer.ledger_id, 0, 2)
    assert reply.status is Status.OK
    # Appended one at a time: each entry saw the previous one confirmed.
    assert [e.lac for e in reply.entries] == [-1, 0, 1]
    await writer.close()


async def test_str_entry_raises_type_error(client: aio.AsyncClient) -> None:
    writer = await client.create_ledger(3, 3, 2)
    with pytest.raises(TypeError):
        writer.append_nowait("text")  # type: ignore[arg-type]
    assert await writer.append(bytearray(b"ok")) == 0
    await writer.close()


async def test_oversize_entry_raises_value_error_before_taking_an_entry_id(
    client: aio.AsyncClient,
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    with pytest.raises(ValueError, match="max_entry_bytes=1000"):
        writer.append_nowait(b"x" * 1001)
    assert await writer.append(b"x" * 1000) == 0
    await writer.close()


async def test_quorums_must_satisfy_e_ge_qw_ge_qa(client: aio.AsyncClient) -> None:
    before = await client.list_ledgers()
    with pytest.raises(ValueError, match="ensemble_size >= write_quorum >= ack_quorum"):
        await client.create_ledger(2, 3, 2)
    with pytest.raises(ValueError, match="VOLATILE"):
        await client.create_ledger(3, 2, 2, durability=Durability.VOLATILE)
    assert await client.list_ledgers() == before  # nothing was created


async def test_not_enough_bookies_error_names_the_available_ones(
    client: aio.AsyncClient, cluster: LocalCluster
) -> None:
    listed = ", ".join(sorted(cluster.bookie_ids))
    with pytest.raises(NotEnoughBookiesError) as info:
        await client.create_ledger(4, 3, 2)
    assert str(info.value) == f"ensemble_size=4 but only 3 bookies are available ({listed})"


async def test_new_ledger_metadata_is_open_with_one_fragment_at_entry_0(
    client: aio.AsyncClient, cluster: LocalCluster
) -> None:
    writer = await client.create_ledger(3, 2, 1, custom_metadata={"app": "test"})
    metadata = await client.ledger_metadata(writer.ledger_id)
    assert metadata.state == "OPEN"
    assert metadata.last_entry_id == -1
    assert (metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum) == (3, 2, 1)
    assert len(metadata.ensembles) == 1
    assert metadata.ensembles[0][0] == 0
    assert sorted(metadata.ensembles[0][1]) == sorted(cluster.bookie_ids)
    assert metadata.custom_metadata == {"app": "test"}
    assert writer.ledger_id in await client.list_ledgers()
    await writer.close()


async def test_appends_after_close_raise_ledger_closed_error(client: aio.AsyncClient) -> None:
    writer = await client.create_ledger(3, 3, 2)
    await writer.append(b"a")
    await writer.close()
    await writer.close()  # idempotent
    with pytest.raises(LedgerClosedError):
        writer.append_nowait(b"b")


async def test_close_waits_for_outstanding_adds(client: aio.AsyncClient) -> None:
    writer = await client.create_ledger(3, 3, 2)
    futures = [writer.append_nowait(b"x") for _ in range(100)]
    await writer.close()
    assert all(f.done() and f.result() == i for i, f in enumerate(futures))
    assert (await client.ledger_metadata(writer.ledger_id)).last_entry_id == 99


async def test_close_retries_when_the_metadata_changed_but_is_still_open(
    client: aio.AsyncClient, other: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    await writer.append(b"a")
    metadata, version = await other.ctx.read_metadata(writer.ledger_id)
    await other.ctx.write_metadata(metadata.with_changes(custom_metadata={"k": "v"}), version)
    await writer.close()
    closed = await client.ledger_metadata(writer.ledger_id)
    assert (closed.state, closed.last_entry_id, closed.custom_metadata) == ("CLOSED", 0, {"k": "v"})


async def test_close_fails_when_the_ledger_is_in_recovery(
    client: aio.AsyncClient, other: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    await writer.append(b"a")
    metadata, version = await other.ctx.read_metadata(writer.ledger_id)
    await other.ctx.write_metadata(metadata.with_changes(state="IN_RECOVERY"), version)
    with pytest.raises(LedgerFencedError, match="recover"):
        await writer.close()
    assert (await client.ledger_metadata(writer.ledger_id)).state == "IN_RECOVERY"


async def test_close_succeeds_when_closed_elsewhere_at_the_same_last_entry(
    client: aio.AsyncClient, other: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    await writer.append(b"a")
    await writer.append(b"b")
    metadata, version = await other.ctx.read_metadata(writer.ledger_id)
    await other.ctx.write_metadata(metadata.with_changes(state="CLOSED", last_entry_id=1), version)
    await writer.close()
    assert writer.metadata.last_entry_id == 1


async def test_close_fails_when_closed_elsewhere_at_another_last_entry(
    client: aio.AsyncClient, other: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    await writer.append(b"a")
    await writer.append(b"b")
    metadata, version = await other.ctx.read_metadata(writer.ledger_id)
    await other.ctx.write_metadata(metadata.with_changes(state="CLOSED", last_entry_id=0), version)
    with pytest.raises(LedgerFencedError, match="closed by recovery at entry 0"):
        await writer.close()


async def test_fenced_ledger_fails_the_writer_with_ledger_fenced_error(
    client: aio.AsyncClient, other: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    for i in range(5):
        await writer.append(b"%d" % i)
    reader = await other.open_ledger(writer.ledger_id, recovery=True)
    assert reader.is_closed
    assert reader.last_add_confirmed == 4
    with pytest.raises(LedgerFencedError):
        await writer.append(b"late")
    with pytest.raises(LedgerFencedError):
        writer.append_nowait(b"later")
    # Recovery closed the ledger at the writer's own last confirmed entry: close agrees.
    await writer.close()
    assert (await client.ledger_metadata(writer.ledger_id)).last_entry_id == 4


async def test_wrong_password_is_refused_on_open(
    client: aio.AsyncClient, other: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2, password=b"right")
    await writer.append(b"secret")
    with pytest.raises(UnauthorizedError):
        await other.open_ledger(writer.ledger_id, password=b"wrong")
    reader = await other.open_ledger(writer.ledger_id, recovery=False, password=b"right")
    assert reader.ledger_id == writer.ledger_id
    await writer.close()


async def test_idle_writer_sends_its_lac_explicitly(
    client: aio.AsyncClient, other: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    for i in range(3):
        await writer.append(b"%d" % i)
    # The last entry carried LAC 1; only an explicit LAC tells readers about entry 2.
    reader = await other.open_ledger(writer.ledger_id, recovery=False)
    assert await reader.wait_last_add_confirmed(1, timeout=10.0) == 2
    assert [e.data for e in await reader.read(2, 2)] == [b"2"]
    await writer.close()


NO_LAC_TIMER = ClientConfig(timeouts=Timeouts(add=5.0, read=5.0, explicit_lac=3600.0))
"""The explicit-LAC timer never fires within a test: only a LAC no append carried is sent."""


async def test_drained_writer_sends_its_lac_without_waiting_for_the_timer(
    cluster: LocalCluster, other: aio.AsyncClient
) -> None:
    async with await aio.connect(cluster.metadata_uri, config=NO_LAC_TIMER) as client:
        writer = await client.create_ledger(3, 3, 2)
        for i in range(3):
            writer.append_nowait(b"%d" % i)
        await writer.append(b"3")
        # Entry 3 carried at most LAC 2; the pipeline is empty now, so the LAC 3 goes out
        # as an explicit message at once (the timer would take an hour).
        reader = await other.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.wait_last_add_confirmed(2, timeout=30.0) == 3
        assert [e.data for e in await reader.read(3, 3)] == [b"3"]
        await writer.close()


def _explicit_lacs(
    client: aio.AsyncClient, writer: aio.AsyncLedgerWriter, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, int]]:
    """The explicit LAC messages the writer sends from now on, as (bookie, lac)."""
    sent: list[tuple[str, int]] = []
    for bookie in writer.metadata.last_ensemble:
        connection = client.ctx.pool.get(bookie)
        plain = connection.send_lac

        def counting(
            ledger_id: int, lac: int, key: bytes, bookie: str = bookie, plain: Any = plain
        ) -> None:
            sent.append((bookie, lac))
            plain(ledger_id, lac, key)

        monkeypatch.setattr(connection, "send_lac", counting)
    return sent


async def test_back_to_back_appends_carry_the_lac_without_explicit_messages(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await aio.connect(cluster.metadata_uri, config=NO_LAC_TIMER) as client:
        writer = await client.create_ledger(3, 3, 2)
        sent = _explicit_lacs(client, writer, monkeypatch)
        for i in range(20):
            await writer.append(b"%d" % i)  # the next append follows each completion at once
        for _ in range(100):  # the check runs a few loop turns (or one average gap) later
            if len(sent) >= 3:
                break
            await asyncio.sleep(0.01)
        # Only the last completion left the pipeline empty: one LAC to each bookie.
        assert sorted(sent) == sorted((b, 19) for b in writer.metadata.last_ensemble)
        await writer.close()


async def test_a_steady_writers_next_append_carries_its_lac(
    cluster: LocalCluster, other: aio.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One append every 10 ms, each acknowledged long before the next: a new LAC waits for
    # the next append (within lac_linger) instead of going to every bookie on its own.
    config = dataclasses.replace(NO_LAC_TIMER, lac_linger=0.2)
    async with await aio.connect(cluster.metadata_uri, config=config) as client:
        writer = await client.create_ledger(3, 3, 2)
        sent = _explicit_lacs(client, writer, monkeypatch)
        futures = []
        for i in range(30):
            futures.append(writer.append_nowait(b"%d" % i))
            await asyncio.sleep(0.01)
        await asyncio.gather(*futures)
        # Without the wait every bookie would have had 29 of them alone. The first one still
        # goes (no gap between appends is known yet), and a stall of the machine longer than
        # the wait may let another through.
        assert len({lac for _, lac in sent}) <= 2
        # Once the appends stop, the last LAC goes out alone when the next append is overdue.
        reader = await other.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.wait_last_add_confirmed(28, timeout=10.0) == 29
        assert {(b, 29) for b in writer.metadata.last_ensemble} <= set(sent)
        await writer.close()


async def test_without_lac_linger_a_paced_writer_tells_each_lac_at_once(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = dataclasses.replace(NO_LAC_TIMER, lac_linger=0.0)
    async with await aio.connect(cluster.metadata_uri, config=config) as client:
        writer = await client.create_ledger(3, 3, 2)
        sent = _explicit_lacs(client, writer, monkeypatch)
        for i in range(10):
            await writer.append(b"%d" % i)
            await asyncio.sleep(0.01)  # no append follows the completion at once
        assert {lac for _, lac in sent} == set(range(10))
        await writer.close()


async def test_volatile_force_returns_the_last_synced_entry(client: aio.AsyncClient) -> None:
    writer = await client.create_ledger(3, 3, 2, durability=Durability.VOLATILE)
    futures = [writer.append_nowait(b"v%d" % i) for i in range(50)]
    assert await asyncio.gather(*futures) == list(range(50))
    assert await writer.force() == 49
    assert writer.last_add_confirmed == 49
    await writer.close()
    metadata = await client.ledger_metadata(writer.ledger_id)
    assert (metadata.durability, metadata.last_entry_id) == (Durability.VOLATILE, 49)


async def test_persistent_force_returns_last_add_confirmed(client: aio.AsyncClient) -> None:
    writer = await client.create_ledger(3, 3, 2)
    writer.append_nowait(b"a")
    assert await writer.force() == 0
    await writer.close()


async def test_delete_ledger_removes_its_metadata(client: aio.AsyncClient) -> None:
    writer = await client.create_ledger(3, 3, 2)
    await writer.close()
    await client.delete_ledger(writer.ledger_id)
    assert writer.ledger_id not in await client.list_ledgers()
    with pytest.raises(NoSuchLedgerError):
        await client.ledger_metadata(writer.ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await client.delete_ledger(writer.ledger_id)


async def test_bookies_lists_the_available_bookies_sorted(
    client: aio.AsyncClient, cluster: LocalCluster
) -> None:
    assert await client.bookies() == sorted(cluster.bookie_ids)


@pytest.mark.zk
async def test_write_and_close_with_zookeeper_metadata(zk_cluster: LocalCluster) -> None:
    async with await aio.connect(zk_cluster.metadata_uri, config=CONFIG) as client:
        writer = await client.create_ledger(3, 3, 2)
        assert await asyncio.gather(*(writer.append_nowait(b"z") for _ in range(50))) == list(
            range(50)
        )
        await writer.close()
        metadata = await client.ledger_metadata(writer.ledger_id)
        assert (metadata.state, metadata.last_entry_id) == ("CLOSED", 49)

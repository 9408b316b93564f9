"""A log writer's callers that stop waiting (cancelled) leave the writer as it was.

flush() waits for the entries in flight; a caller that stops waiting (asyncio.timeout()
around it, a task cancelled at shutdown) only stops its own wait: the entries stay in
flight, their records are acknowledged as usual and the writer goes on. close() goes on
too: a second close() called while the first is under way, or after a first one whose
caller was cancelled, returns only once the ledger is closed and its end recorded (its
caller takes the writer for closed, and a reader waits for that end to move on).

Over real bookies; the writer's ledger completes its entries only once the test opens the
gate, which holds the writer's calls for as long as the test needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import walog.aio
from tests.integration.test_log_roll_order import GatedLedger, GatingClient
from walog.errors import LedgerClosedError
from walog.ledger.options import LedgerOptions
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.log.writer import AsyncLogWriter, LogWriterConfig, open_log_writer
from walog.testing import LocalCluster


@pytest.fixture
async def gating(cluster: LocalCluster, log_name: str) -> AsyncIterator[GatingClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        await client.open_log(log_name)
        yield GatingClient(client)


async def writer_with_a_record_held(
    gating: GatingClient, name: str
) -> tuple[AsyncLogWriter, GatedLedger, asyncio.Future[Position]]:
    """A writer whose first record is written to the bookies and held at the gate."""
    writer = await open_log_writer(
        gating,  # type: ignore[arg-type]
        name,
        LedgerOptions(),
        RollPolicy(),
        LogWriterConfig(),
    )
    ledger = gating.ledgers[-1]
    held = writer.append_nowait(b"held")
    await ledger.appended.wait()
    await asyncio.wait_for(asyncio.gather(*ledger.written), 10)
    return writer, ledger, held


async def test_a_cancelled_flush_leaves_the_entries_in_flight_and_the_writer_usable(
    gating: GatingClient, log_name: str
) -> None:
    writer, ledger, held = await writer_with_a_record_held(gating, log_name)
    flushing = asyncio.ensure_future(writer.flush())
    await asyncio.sleep(0)  # flush() starts, and waits for the held record
    flushing.cancel()  # e.g. asyncio.timeout() around flush()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    if not ledger.gate.done():  # a cancelled completion cancels what it waits on: the gate
        ledger.gate.set_result(None)
    first = await asyncio.wait_for(held, 10)
    second = await asyncio.wait_for(writer.append(b"after"), 10)
    assert (second.ledger_id, second.entry_id) == (first.ledger_id, first.entry_id + 1)
    await writer.close()


async def closing_with_a_record_held(
    gating: GatingClient, name: str
) -> tuple[AsyncLogWriter, GatedLedger, asyncio.Future[None]]:
    """A writer whose close() waits in its flush for a record held at the ledger's gate."""
    writer, ledger, _ = await writer_with_a_record_held(gating, name)
    closing = asyncio.ensure_future(writer.close())
    await asyncio.sleep(0)  # close() starts, and waits for the held record
    with pytest.raises(LedgerClosedError):
        writer.append_nowait(b"refused")  # close() began
    return writer, ledger, closing


async def log_states(gating: GatingClient, name: str) -> list[tuple[str, int]]:
    segments = await (await gating.open_log(name)).segments()
    return [(s.state, s.last_entry_id) for s in segments]


async def test_a_second_close_waits_for_the_close_under_way(
    gating: GatingClient, log_name: str
) -> None:
    writer, ledger, closing = await closing_with_a_record_held(gating, log_name)
    again = asyncio.ensure_future(writer.close())
    await asyncio.sleep(0.05)
    assert not again.done(), "close() returned while the ledger is still being written"
    ledger.gate.set_result(None)
    await asyncio.wait_for(again, 10)
    assert await log_states(gating, log_name) == [("CLOSED", 0)]
    await closing


async def test_close_after_a_cancelled_close_still_closes_the_ledger(
    gating: GatingClient, log_name: str
) -> None:
    writer, ledger, closing = await closing_with_a_record_held(gating, log_name)
    closing.cancel()  # e.g. asyncio.timeout() around close()
    with pytest.raises(asyncio.CancelledError):
        await closing
    ledger.gate.set_result(None)
    await asyncio.wait_for(writer.close(), 10)
    assert await log_states(gating, log_name) == [("CLOSED", 0)], "close() left it open"

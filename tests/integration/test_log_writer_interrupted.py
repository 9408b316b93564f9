"""A log writer's callers that stop waiting (cancelled) leave the writer as it was.

flush() waits for the entries in flight; a caller that stops waiting (asyncio.timeout()
around it, a task cancelled at shutdown) only stops its own wait: the entries stay in
flight, their records are acknowledged as usual and the writer goes on.

Over real bookies; the writer's ledger completes its entries only once the test opens the
gate, which holds the writer's calls for as long as the test needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import walog.aio
from tests.integration.test_log_roll_order import GatedLedger, GatingClient
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.log.writer import AsyncLogWriter, LedgerOptions, LogWriterConfig, open_log_writer
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

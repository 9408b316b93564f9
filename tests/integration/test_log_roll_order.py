"""No holes across a roll: one writer's acknowledged records are a prefix of its appends.

After a roll switches records to the next ledger, an entry of the new ledger can complete
while an entry of the previous one is still in flight. The log writer must hold the new
ledger's acknowledgements until the older entries completed, and fail every later record
when an older one fails, or a takeover that finds the older record absent would leave the
log holding a later record without its predecessor. And ``roll()`` called while an earlier
roll is still closing the ledger it left switches once more: its own roll, not that one.

Over real bookies; the first ledger's completions pass through a gate the test opens (or
fails), which holds the writer's view of an entry written to the bookies for real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import walog.aio
from tests.integration.waiting import eventually
from walog.aio import AsyncClient
from walog.errors import LedgerFencedError, WriterFencedError
from walog.ledger.writer import AsyncLedgerWriter
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.log.writer import AsyncLogWriter, LedgerOptions, LogWriterConfig, open_log_writer
from walog.testing import LocalCluster


class GatedLedger:
    """A real ledger writer whose appends complete only once the gate is opened."""

    def __init__(self, inner: AsyncLedgerWriter) -> None:
        self._inner = inner
        self.gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.written: list[asyncio.Future[int]] = []  # the real entries' futures
        self.completions: list[asyncio.Future[int]] = []  # what the log writer sees
        self.appended = asyncio.Event()

    @property
    def ledger_id(self) -> int:
        return self._inner.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._inner.last_add_confirmed

    def append_nowait(self, data: bytes) -> asyncio.Future[int]:
        written = self._inner.append_nowait(data)
        self.written.append(written)

        async def through_gate() -> int:
            entry_id = await written
            await self.gate
            return entry_id

        completion = asyncio.ensure_future(through_gate())
        self.completions.append(completion)
        self.appended.set()
        return completion

    async def close(self) -> None:
        await self._inner.close()


class GatingClient:
    """The real client, except that the ledgers it creates are :class:`GatedLedger`s."""

    def __init__(self, inner: AsyncClient) -> None:
        self._inner = inner
        self.ledgers: list[GatedLedger] = []

    @property
    def ctx(self) -> Any:
        return self._inner.ctx

    async def create_ledger(self, *args: Any, **kwargs: Any) -> GatedLedger:
        ledger = GatedLedger(await self._inner.create_ledger(*args, **kwargs))
        self.ledgers.append(ledger)
        return ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
async def gating(cluster: LocalCluster) -> AsyncIterator[GatingClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        await client.open_log("roll-order")  # created once; each test takes it over
        yield GatingClient(client)


async def rolled_with_one_record_held(
    gating: GatingClient,
) -> tuple[AsyncLogWriter, asyncio.Future[Position], asyncio.Future[Position], GatedLedger]:
    """A writer whose first record (in ledger 1) is held at its gate, rolled to ledger 2,
    where a second record's entry is written and acknowledged by the bookies."""
    writer = await open_log_writer(
        gating,  # type: ignore[arg-type]
        "roll-order",
        LedgerOptions(),
        RollPolicy(),
        LogWriterConfig(),
    )
    first_ledger = gating.ledgers[-1]
    first = writer.append_nowait(b"first")
    await first_ledger.appended.wait()  # the record's entry goes out at the turn's end
    await asyncio.wait_for(asyncio.gather(*first_ledger.written), 10)
    roll = asyncio.ensure_future(writer.roll())

    async def switched() -> None:  # the roll switches before it closes the old ledger
        assert writer.ledger_id != first_ledger.ledger_id

    await eventually(switched)
    second_ledger = gating.ledgers[-1]
    second_ledger.gate.set_result(None)
    second = writer.append_nowait(b"second")
    await second_ledger.appended.wait()
    # The writer's own callback on the completion was registered first, so it has run
    # once this wait returns.
    await asyncio.wait_for(asyncio.gather(*second_ledger.completions), 10)
    assert not roll.done()  # the roll closes the first ledger only after its entry
    roll.cancel()
    return writer, first, second, first_ledger


async def test_a_new_ledgers_ack_waits_for_the_previous_ledgers_entries(
    gating: GatingClient,
) -> None:
    writer, first, second, first_ledger = await rolled_with_one_record_held(gating)
    assert not second.done(), "a record of the new ledger was acknowledged before an older one"
    order: list[str] = []
    first.add_done_callback(lambda _: order.append("first"))
    second.add_done_callback(lambda _: order.append("second"))
    first_ledger.gate.set_result(None)
    positions = await asyncio.gather(first, second)
    await asyncio.sleep(0)  # the done-callbacks run in the loop turn after
    assert [p.ledger_id for p in positions] == [first_ledger.ledger_id, writer.ledger_id]
    assert order == ["first", "second"]
    await writer.close()


async def test_a_failed_entry_fails_every_later_record_across_a_roll(
    gating: GatingClient,
) -> None:
    writer, first, second, first_ledger = await rolled_with_one_record_held(gating)
    first_ledger.gate.set_exception(LedgerFencedError("fenced while the record was in flight"))
    with pytest.raises(WriterFencedError):
        await first
    # The second record's entry is on the bookies, but its predecessor failed: it fails too.
    with pytest.raises(WriterFencedError):
        await second
    with pytest.raises(WriterFencedError):
        writer.append_nowait(b"third")
    await writer.close()


async def test_a_roll_called_while_another_closes_its_old_ledger_switches_again(
    gating: GatingClient,
) -> None:
    # The held first record keeps the first roll in its closing phase: it has switched to
    # the second ledger already. A roll called now must not count that one as its own.
    writer, first, second, first_ledger = await rolled_with_one_record_held(gating)
    second_ledger_id = writer.ledger_id
    again = asyncio.ensure_future(writer.roll())
    await asyncio.sleep(0.05)
    assert not again.done(), "roll() returned while the ledger current at its call still is"
    first_ledger.gate.set_result(None)
    await asyncio.wait_for(asyncio.gather(first, second), 10)

    async def third_ledger_created() -> None:
        assert gating.ledgers[-1].ledger_id not in (first_ledger.ledger_id, second_ledger_id)

    await eventually(third_ledger_created)
    gating.ledgers[-1].gate.set_result(None)
    await asyncio.wait_for(again, 10)
    assert writer.ledger_id == gating.ledgers[-1].ledger_id
    third = await asyncio.wait_for(writer.append_nowait(b"third"), 10)
    assert third.ledger_id == gating.ledgers[-1].ledger_id
    await writer.close()

"""No holes across a roll: one writer's records in the log, and its acknowledged ones, are
prefixes of its appends.

After a roll switches records to the next ledger, an entry of the previous one may still be
in flight. Were the new ledger's entries sent at once, one could become durable while the
older entry fails and a takeover's recovery leaves it out: the log would hold a later record
without its predecessor. So the writer holds the new ledger's entries until the older ones
completed, and fails them unsent when an older one fails. And ``roll()`` called while an
earlier roll is still closing the ledger it left switches once more: its own roll, not that
one.

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
from walog.errors import LedgerFencedError, NotEnoughBookiesError, WalogError, WriterFencedError
from walog.ledger.options import LedgerOptions
from walog.ledger.writer import AsyncLedgerWriter
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.log.writer import AsyncLogWriter, LogWriterConfig, open_log_writer
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

    async def create_ledger_with(self, *args: Any, **kwargs: Any) -> GatedLedger:
        ledger = GatedLedger(await self._inner.create_ledger_with(*args, **kwargs))
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
) -> tuple[AsyncLogWriter, asyncio.Future[Position], GatedLedger, GatedLedger]:
    """A writer whose first record (in ledger 1) is held at its gate, switched to ledger 2
    by a roll that waits for that record before it closes ledger 1."""
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
    assert not roll.done()  # the roll closes the first ledger only after its entry
    roll.cancel()  # the caller's wait only: the roll itself goes on
    return writer, first, first_ledger, gating.ledgers[-1]


async def appended_and_sent_at_turn_end(writer: AsyncLogWriter, data: bytes) -> Any:
    """Append a record and let the loop turn in which its entry would be sent end."""
    record = writer.append_nowait(data)
    await asyncio.sleep(0)
    return record


async def test_records_for_a_new_ledger_wait_unsent_until_the_previous_ledgers_entries_completed(
    gating: GatingClient,
) -> None:
    writer, first, first_ledger, second_ledger = await rolled_with_one_record_held(gating)
    second_ledger.gate.set_result(None)
    second = await appended_and_sent_at_turn_end(writer, b"second")
    assert not second_ledger.appended.is_set(), (
        "a record went to the new ledger while an entry of the previous one was in flight"
    )
    order: list[str] = []
    first.add_done_callback(lambda _: order.append("first"))
    second.add_done_callback(lambda _: order.append("second"))
    first_ledger.gate.set_result(None)
    positions = await asyncio.wait_for(asyncio.gather(first, second), 10)
    await asyncio.sleep(0)  # the done-callbacks run in the loop turn after
    assert [p.ledger_id for p in positions] == [first_ledger.ledger_id, writer.ledger_id]
    assert order == ["first", "second"]
    await writer.close()


@pytest.mark.parametrize(
    ("failure", "raised"),
    [
        (LedgerFencedError("fenced while the record was in flight"), WriterFencedError),
        (NotEnoughBookiesError("ack quorum lost while the record was in flight"), WalogError),
    ],
    ids=["fenced", "quorum-lost"],
)
async def test_a_failed_entry_fails_every_later_record_across_a_roll_before_it_is_sent(
    gating: GatingClient, failure: WalogError, raised: type[WalogError]
) -> None:
    writer, first, first_ledger, second_ledger = await rolled_with_one_record_held(gating)
    second_ledger.gate.set_result(None)
    second = await appended_and_sent_at_turn_end(writer, b"second")
    first_ledger.gate.set_exception(failure)
    with pytest.raises(raised):
        await first
    with pytest.raises(raised):
        await second
    # Whatever recovery decides about the first record, the second never reached a bookie.
    assert second_ledger.written == [], "a record after a failed one was sent"
    with pytest.raises(raised):
        writer.append_nowait(b"third")
    await writer.close()


async def test_a_roll_called_while_another_closes_its_old_ledger_switches_again(
    gating: GatingClient,
) -> None:
    # The held first record keeps the first roll in its closing phase: it has switched to
    # the second ledger already. A roll called now must not count that one as its own.
    writer, first, first_ledger, second_ledger = await rolled_with_one_record_held(gating)
    second_ledger.gate.set_result(None)
    second = writer.append_nowait(b"second")
    again = asyncio.ensure_future(writer.roll())
    await asyncio.sleep(0.05)
    assert not again.done(), "roll() returned while the ledger current at its call still is"
    first_ledger.gate.set_result(None)
    await asyncio.wait_for(asyncio.gather(first, second), 10)

    async def third_ledger_created() -> None:
        assert gating.ledgers[-1].ledger_id not in (
            first_ledger.ledger_id,
            second_ledger.ledger_id,
        )

    await eventually(third_ledger_created)
    gating.ledgers[-1].gate.set_result(None)
    await asyncio.wait_for(again, 10)
    assert writer.ledger_id == gating.ledgers[-1].ledger_id
    third = await asyncio.wait_for(writer.append_nowait(b"third"), 10)
    assert third.ledger_id == gating.ledgers[-1].ledger_id
    await writer.close()

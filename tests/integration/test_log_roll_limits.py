"""A roll-policy limit reached while a roll is under way, or after one failed, still rolls.

The limits start a roll when an entry is sent or, for ``max_age``, when the ledger's age
timer fires, which it does once. A limit reached while an earlier roll is still under way
(it has switched and closes the ledger it left) cannot start a roll then: it must start
once that roll ended, or an idle writer keeps its ledger past ``max_age`` for good (and
retention cannot delete what it holds). Likewise a failed roll is tried again once the
pause after it (``ROLL_RETRY_SECONDS``) is over, not only when the next record comes.

Over real bookies; the first ledger's completions pass through a gate the test opens,
which keeps the first roll closing that ledger for as long as the test needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import walog.aio
from tests.integration.test_log_roll_order import GatingClient
from tests.integration.waiting import eventually
from walog.errors import NotEnoughBookiesError
from walog.log.retention import RollPolicy
from walog.log.writer import (
    ROLL_RETRY_SECONDS,
    AsyncLogWriter,
    LedgerOptions,
    LogWriterConfig,
    open_log_writer,
)
from walog.testing import LocalCluster

MAX_AGE = 0.5


class FailingClient(GatingClient):
    """A :class:`GatingClient` whose next ledger creations can fail, as they do while too
    few bookies are registered."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.failing_creates = 0

    async def create_ledger_with(self, *args: Any, **kwargs: Any) -> Any:
        if self.failing_creates:
            self.failing_creates -= 1
            raise NotEnoughBookiesError("need 3 bookies, 2 available")
        return await super().create_ledger_with(*args, **kwargs)


@pytest.fixture
async def gating(cluster: LocalCluster, log_name: str) -> AsyncIterator[FailingClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        await client.open_log(log_name)
        yield FailingClient(client)


async def aging_writer(gating: FailingClient, log_name: str) -> AsyncLogWriter:
    """A writer of ``log_name`` whose ledgers roll at ``MAX_AGE``."""
    return await open_log_writer(
        gating, log_name, LedgerOptions(), RollPolicy(max_age=MAX_AGE), LogWriterConfig()
    )


async def test_a_ledger_that_aged_while_a_roll_closed_its_predecessor_rolls_when_idle(
    gating: FailingClient, log_name: str
) -> None:
    loop = asyncio.get_running_loop()
    writer = await aging_writer(gating, log_name)
    first_ledger = gating.ledgers[-1]
    first = writer.append_nowait(b"first")  # held at the first ledger's gate
    await first_ledger.appended.wait()

    async def switched() -> None:  # the age roll switches, then waits to close the first
        assert writer.ledger_id != first_ledger.ledger_id

    await eventually(switched)
    switched_by = loop.time()
    second_ledger = gating.ledgers[-1]
    second_ledger.gate.set_result(None)
    second = writer.append_nowait(b"second")  # held back until "first" completed
    # The second ledger's age timer fires while the first roll still waits for "first".
    await asyncio.sleep(switched_by + MAX_AGE + 0.1 - loop.time())
    assert writer.ledger_id == second_ledger.ledger_id
    first_ledger.gate.set_result(None)
    await asyncio.wait_for(asyncio.gather(first, second), 10)

    async def rolled_again() -> None:  # no record comes: only the age limit can roll it
        assert writer.ledger_id != second_ledger.ledger_id, "an aged ledger never rolled"

    await eventually(rolled_again, within=5)
    await writer.close()
    segments = await (await gating.open_log(log_name)).segments()
    ends = [(s.state, s.last_entry_id) for s in segments]
    assert ends == [("CLOSED", 0), ("CLOSED", 0), ("CLOSED", -1)]


async def test_an_automatic_roll_that_failed_is_tried_again_when_idle(
    gating: FailingClient, log_name: str
) -> None:
    writer = await aging_writer(gating, log_name)
    first_ledger = gating.ledgers[-1]
    first_ledger.gate.set_result(None)
    gating.failing_creates = 1  # the age roll's new ledger
    await asyncio.wait_for(writer.append(b"first"), 10)

    async def roll_failed() -> None:
        assert gating.failing_creates == 0

    await eventually(roll_failed)
    assert writer.ledger_id == first_ledger.ledger_id

    async def rolled() -> None:  # no record comes: the retry must start on its own
        assert writer.ledger_id != first_ledger.ledger_id, "the failed roll was never retried"

    await eventually(rolled, within=ROLL_RETRY_SECONDS + 5)
    await writer.close()

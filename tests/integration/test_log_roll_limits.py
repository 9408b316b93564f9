"""A roll-policy limit reached while a roll is under way still rolls the ledger.

The limits start a roll when an entry is sent or, for ``max_age``, when the ledger's age
timer fires, which it does once. A limit reached while an earlier roll is still under way
(it has switched and closes the ledger it left) cannot start a roll then: it must start
once that roll ended, or an idle writer keeps its ledger past ``max_age`` for good (and
retention cannot delete what it holds).

Over real bookies; the first ledger's completions pass through a gate the test opens,
which keeps the first roll closing that ledger for as long as the test needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import walog.aio
from tests.integration.test_log_roll_order import GatingClient
from tests.integration.waiting import eventually
from walog.log.retention import RollPolicy
from walog.log.writer import LedgerOptions, LogWriterConfig, open_log_writer
from walog.testing import LocalCluster

MAX_AGE = 0.5


@pytest.fixture
async def gating(cluster: LocalCluster, log_name: str) -> AsyncIterator[GatingClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        await client.open_log(log_name)
        yield GatingClient(client)


async def test_a_ledger_that_aged_while_a_roll_closed_its_predecessor_rolls_when_idle(
    gating: GatingClient, log_name: str
) -> None:
    loop = asyncio.get_running_loop()
    writer = await open_log_writer(
        gating,  # type: ignore[arg-type]
        log_name,
        LedgerOptions(),
        RollPolicy(max_age=MAX_AGE),
        LogWriterConfig(),
    )
    first_ledger = gating.ledgers[-1]
    first = writer.append_nowait(b"first")  # held at the first ledger's gate
    await first_ledger.appended.wait()

    async def switched() -> None:  # the age roll switches, then waits to close the first
        assert writer.ledger_id != first_ledger.ledger_id

    await eventually(switched)
    switched_by = loop.time()
    second_ledger = gating.ledgers[-1]
    second_ledger.gate.set_result(None)
    second = writer.append_nowait(b"second")
    await second_ledger.appended.wait()
    await asyncio.wait_for(asyncio.gather(*second_ledger.completions), 10)
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

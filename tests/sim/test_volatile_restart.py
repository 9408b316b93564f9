"""A VOLATILE writer and bookies that restart between two appends, over the in-memory
transport (the writer's rule: an answer from a new incarnation of a bookie that may have
lost entries it acknowledged never counts; the writer stops first)."""

from __future__ import annotations

import asyncio

import pytest

from tests.sim.loop import SimLoop, run
from tests.sim.network import FaultConfig
from tests.sim.world import World
from walog import mutations
from walog.errors import BookieRestartedError
from walog.wire.durability import Durability


def _restart_every_bookie(world: World, bookies: tuple[str, ...]) -> None:
    for bookie in bookies:
        world.crash(bookie)  # nothing in flight: the writer sees no error
    for bookie in bookies:
        world.restart(bookie)


async def _world() -> World:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SimLoop)
    return World(loop, 3, FaultConfig())


def test_a_volatile_writer_stops_before_counting_a_bookie_that_lost_acknowledged_entries() -> None:
    async def scenario() -> None:
        world = await _world()
        client = world.async_client("w")
        writer = await client.create_ledger(3, 3, 2, durability=Durability.VOLATILE)
        assert [await writer.append(b"e%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        _restart_every_bookie(world, writer.metadata.last_ensemble)

        with pytest.raises(BookieRestartedError, match=r"restarted and may have lost entries"):
            await writer.append(b"after the loss")
        with pytest.raises(BookieRestartedError):
            await writer.force()
        assert writer.last_add_confirmed < 5
        # Recovery closes the ledger at what the bookies still hold: nothing after a gap.
        reader = await client.open_ledger(writer.ledger_id, recovery=True)
        assert reader.last_add_confirmed < 5

    run(scenario(), seed=1)


def test_a_volatile_writer_goes_on_after_a_restart_that_lost_nothing() -> None:
    async def scenario() -> None:
        world = await _world()
        writer = await world.async_client("w").create_ledger(
            3, 3, 2, durability=Durability.VOLATILE
        )
        assert [await writer.append(b"e%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        assert await writer.force() == 4  # every acknowledged entry synced
        _restart_every_bookie(world, writer.metadata.last_ensemble)

        assert await writer.append(b"e5") == 5
        assert await writer.force() == 5
        await writer.close()
        assert writer.metadata.last_entry_id == 5

    run(scenario(), seed=2)


def test_a_persistent_writer_ignores_bookie_restarts() -> None:
    async def scenario() -> None:
        world = await _world()
        writer = await world.async_client("w").create_ledger(3, 3, 2)
        assert [await writer.append(b"e%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        _restart_every_bookie(world, writer.metadata.last_ensemble)

        assert await writer.append(b"e5") == 5
        await writer.close()
        assert writer.metadata.last_entry_id == 5

    run(scenario(), seed=3)


def test_the_old_rule_acknowledges_entries_after_the_loss() -> None:
    # The mutation that plants the old behaviour: the append after the loss is
    # acknowledged, and the ledger can never be synced past the gap.
    async def scenario() -> None:
        world = await _world()
        writer = await world.async_client("w").create_ledger(
            3, 3, 2, durability=Durability.VOLATILE
        )
        assert [await writer.append(b"e%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        _restart_every_bookie(world, writer.metadata.last_ensemble)
        assert await writer.append(b"after the loss") == 5
        assert await writer.force() < 5

    with mutations.enabled_mutations("volatile_writer_ignores_restart"):
        run(scenario(), seed=1)

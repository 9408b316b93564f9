"""The simulator's own parts: virtual time, bookie semantics, network faults, metadata CAS."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.sim.bookie import SimBookie
from tests.sim.loop import SimDeadlock, SimLoop, run
from tests.sim.metadata import SimMetadataServer, SimMetadataStore
from tests.sim.network import FaultConfig, SimBookiePool, SimNetwork
from walog.config import Timeouts
from walog.errors import BookieUnavailableError, MetadataConflictError
from walog.wire.digest import entry_digest, master_key
from walog.wire.durability import Durability
from walog.wire.status import Status

KEY = master_key(b"")
L = 7


def _world(
    loop: SimLoop, faults: FaultConfig | None = None, n: int = 3
) -> tuple[SimNetwork, SimBookiePool]:
    bookies = {f"b{i}": SimBookie(f"b{i}", loop.trace) for i in range(n)}
    net = SimNetwork(loop, bookies, faults or FaultConfig())
    return net, SimBookiePool(net, "c", Timeouts(add=1.0, read=1.0))


def _add(pool: SimBookiePool, bookie: str, entry: int, lac: int = -1, **kw: Any) -> Any:
    data = f"d{entry}".encode()
    return pool.get(bookie).add(L, entry, lac, data, entry_digest(L, entry, lac, data), KEY, **kw)


def test_virtual_clock_jumps_to_timers_and_deadlock_is_reported() -> None:
    async def sleeper() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3600)
        return loop.time()

    assert run(sleeper(), seed=1)[0] == pytest.approx(3600)

    async def stuck() -> None:
        await asyncio.Event().wait()

    with pytest.raises(SimDeadlock):
        run(stuck(), seed=1)


def test_same_seed_gives_same_trace() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        _net, pool = _world(loop, FaultConfig(drop=0.2, duplicate=0.2, reorder=True))
        futures = [_add(pool, f"b{e % 3}", e) for e in range(30)]
        await asyncio.gather(*futures, return_exceptions=True)

    traces = []
    for _ in range(2):
        _, loop = run(scenario(), seed=42)
        traces.append(loop.trace.events)
    assert traces[0] == traces[1]
    _, other = run(scenario(), seed=43)
    assert other.trace.events != traces[0]


def test_fenced_bookie_refuses_plain_adds_but_takes_recovery_writes() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        net, pool = _world(loop)
        assert (await _add(pool, "b0", 0)).status is Status.OK
        assert (await pool.get("b0").fence(L, KEY)).last_entry_id == 0
        assert (await _add(pool, "b0", 1)).status is Status.FENCED
        assert (await _add(pool, "b0", 1, recovery=True)).status is Status.OK
        net.crash("b0")
        net.restart("b0")
        assert net.bookies["b0"].is_fenced(L)
        wrong = pool.get("b0").fence(L, master_key(b"other"))
        assert (await wrong).status is Status.UNAUTHORIZED

    run(scenario(), seed=1)


def test_volatile_entries_are_lost_on_crash_unless_forced() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        net, pool = _world(loop)
        await _add(pool, "b0", 0, durability=Durability.VOLATILE)
        assert (await pool.get("b0").force(L, KEY)).last_add_synced == 0
        await _add(pool, "b0", 1, durability=Durability.VOLATILE)
        net.crash("b0")
        net.restart("b0")
        bookie = net.bookies["b0"]
        assert bookie.stored(L, 0) is not None
        assert bookie.stored(L, 1) is None

    run(scenario(), seed=1)


def test_long_poll_returns_when_lac_passes() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        _net, pool = _world(loop)
        await _add(pool, "b0", 0)
        poll = asyncio.ensure_future(
            pool.get("b0").read(L, 1, 1, previous_lac=-1, long_poll_timeout=30.0)
        )
        await asyncio.sleep(5)
        assert not poll.done()
        await _add(pool, "b0", 1, lac=0)
        reply = await poll
        assert reply.lac == 0 and [e.entry_id for e in reply.entries] == [1]
        assert loop.time() < 6

    run(scenario(), seed=1)


def test_lost_or_paused_request_times_out_as_unavailable() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        net, pool = _world(loop)
        net.partition("c", "b1")
        with pytest.raises(BookieUnavailableError):
            await _add(pool, "b1", 0)
        net.heal()
        net.pause("b2")
        with pytest.raises(BookieUnavailableError):
            await _add(pool, "b2", 0)
        net.resume("b2")  # the held add is applied late, after the client gave up
        assert net.bookies["b2"].stored(L, 0) is not None
        net.crash("b0")
        started = loop.time()
        with pytest.raises(BookieUnavailableError):
            await pool.get("b0").read_lac(L)
        assert loop.time() - started < 0.5  # refused, not timed out

    run(scenario(), seed=1)


def test_metadata_cas_lets_exactly_one_racer_win() -> None:
    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        server = SimMetadataServer(loop)
        stores = [SimMetadataStore(server, f"s{i}") for i in range(4)]
        await stores[0].create("/x", b"0")
        fired: list[int] = []
        stores[1].watch("/x", lambda: fired.append(1))
        results = await asyncio.gather(
            *(s.set("/x", f"{i}".encode(), 0) for i, s in enumerate(stores)),
            return_exceptions=True,
        )
        assert fired
        return results

    for seed in range(5):
        results, _ = run(scenario(), seed=seed)
        assert sum(1 for r in results if r == 1) == 1
        assert sum(1 for r in results if isinstance(r, MetadataConflictError)) == 3

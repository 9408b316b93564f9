"""The simulated world of one schedule: bookies, network, metadata, clients, a nemesis.

A :class:`World` holds the simulated bookies, network and metadata server of one schedule
and hands out clients (a :class:`LedgerContext` or an :class:`AsyncClient` each, over the
simulated store and pool). A :class:`Nemesis` crashes, restarts, pauses and partitions
bookies at random times. Every choice comes from the loop's seeded RNG.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
from collections.abc import Awaitable
from typing import Any

from tests.sim import naming
from tests.sim.bookie import SimBookie
from tests.sim.disk import SimDisk
from tests.sim.engine import EngineBookie, EngineTunables
from tests.sim.invariants import History
from tests.sim.log_invariants import LogHistory
from tests.sim.loop import SimLoop
from tests.sim.metadata import SimMetadataServer, SimMetadataStore, _Node
from tests.sim.network import FaultConfig, SimBookiePool, SimNetwork
from walog.aio import AsyncClient
from walog.config import ClientConfig, Timeouts
from walog.ledger.context import LedgerContext
from walog.ledger.ensemble import Placement
from walog.log.position import Position
from walog.metadata.layout import bookie_path
from walog.wire.digest import master_key
from walog.wire.durability import Durability

KEY = master_key(b"")
TIMEOUTS = Timeouts(add=1.0, read=1.0, metadata=1.0, explicit_lac=0.05)


Bookie = SimBookie | EngineBookie


class World:
    """Bookies, network, metadata and the record of one schedule.

    Args:
        loop: the simulation's loop.
        bookies: how many bookies.
        faults: the network's faults.
        engine: run each bookie's real storage engine with these settings
            (tests/sim/engine.py) instead of the in-memory model.
    """

    def __init__(
        self,
        loop: SimLoop,
        bookies: int,
        faults: FaultConfig,
        engine: EngineTunables | None = None,
    ) -> None:
        self.loop = loop
        self.rng = loop.rng
        self.trace = loop.trace
        self.meta = SimMetadataServer(loop)
        self.bookies: dict[str, Bookie] = {}
        for i in range(bookies):
            bookie_id = f"b{i}"
            if engine is None:
                self.bookies[bookie_id] = SimBookie(bookie_id, loop.trace)
            else:
                self.bookies[bookie_id] = self._engine(bookie_id, engine)
        self.net = SimNetwork(loop, self.bookies, faults)
        self.history = History(self.bookies)
        self.meta.observers.append(self.history.on_metadata)
        self.net.fence_observers.append(self.history.on_fence)
        self.log_history = LogHistory()
        self.meta.observers.append(self.log_history.metadata_observer(self.history.violate))
        self.history.naming = self._unnamed_entry
        self.log_history.naming = self._unnamed_record
        self.log_options = (3, 3, 2, 2, Durability.PERSISTENT)
        """Log scenarios: (ensemble, write quorum, ack quorum, entries per ledger,
        durability)."""
        self.client_names: list[str] = []
        self.cancel_chance = 0.0
        """Probability that a client call made through :func:`cancellable` is cancelled at a
        random moment."""
        self.held: set[str] = set()
        """Bookies a scenario keeps down: the nemesis and the end of chaos leave them be."""
        self.paused: set[str] = set()
        self._supervisor: asyncio.Future[bool] | None = None  # after a heal: see heal_all
        self._clients: list[LedgerContext] = []
        for bookie_id, bookie in self.bookies.items():
            if isinstance(bookie, EngineBookie):
                bookie.start(functools.partial(self._register, bookie_id))
            else:
                self._register(bookie_id)

    def _unnamed_entry(self, ledger_id: int, entry_id: int) -> str | None:
        return naming.unnamed_entry(self.meta.nodes, self.bookies, ledger_id, entry_id)

    def _unnamed_record(self, position: Position) -> str | None:
        return naming.unlisted_ledger(self.meta.nodes, position.ledger_id) or self._unnamed_entry(
            position.ledger_id, position.entry_id
        )

    def _engine(self, bookie_id: str, tunables: EngineTunables) -> EngineBookie:
        bookie = EngineBookie(
            bookie_id,
            self.loop,
            self.rng,
            self.trace,
            tunables,
            lambda rule, detail: self.history.violate(rule, detail),
            session=lambda: SimMetadataStore(self.meta, f"gc-{bookie_id}"),
        )
        bookie.on_planned_crash = functools.partial(self.crash, bookie_id)
        return bookie

    @property
    def engines(self) -> list[EngineBookie]:
        """The bookies that run the real engine."""
        return [b for b in self.bookies.values() if isinstance(b, EngineBookie)]

    async def all_up(self, limit_s: float = 30.0) -> bool:
        """Wait until every bookie not held down serves (engines replay when they open);
        False if some did not within ``limit_s``."""
        deadline = self.loop.time() + limit_s
        while self.loop.time() < deadline:
            down = [i for i, b in self.bookies.items() if not b.up and i not in self.held]
            if not down:
                return True
            for bookie_id in down:  # a supervisor starts a process whose start failed again
                bookie = self.bookies[bookie_id]
                if isinstance(bookie, EngineBookie) and not bookie.opening:
                    self.restart(bookie_id)
            await asyncio.sleep(0.01)
        return False

    def _register(self, bookie_id: str) -> None:
        path = bookie_path(bookie_id)
        self.meta.nodes[path] = _Node(b"{}", owner=bookie_id)
        self.meta.changed(path)

    def client(self, name: str) -> LedgerContext:
        """A new client process: its own metadata session and bookie connections."""
        ctx = LedgerContext(
            SimMetadataStore(self.meta, name),
            SimBookiePool(self.net, name, TIMEOUTS),
            ClientConfig(timeouts=TIMEOUTS),
        )
        self._clients.append(ctx)
        self.client_names.append(name)
        return ctx

    def async_client(self, name: str) -> AsyncClient:
        """A new client process as the public async API, with seeded placement."""
        client = AsyncClient(self.client(name))
        client._placement = self.placement()  # the default one is seeded from the OS
        return client

    def placement(self) -> Placement:
        """A placement whose choices come from the schedule's seed."""
        return Placement(random.Random(self.rng.getrandbits(64)))

    async def crash_client(self, ctx: LedgerContext) -> None:
        """The client process dies: its requests stop, its session ends."""
        self.trace.log(f"client {ctx.store.session} CRASH")  # type: ignore[attr-defined]
        await ctx.pool.close()
        await ctx.store.close()

    def crash(self, bookie_id: str) -> None:
        """Crash a bookie; its registration goes with its session."""
        self.paused.discard(bookie_id)
        self.net.crash(bookie_id)
        self.meta.expire(bookie_id)

    def restart(self, bookie_id: str) -> None:
        """Restart a crashed bookie, which registers again (an engine once it replayed)."""
        bookie = self.bookies[bookie_id]
        if isinstance(bookie, EngineBookie):
            bookie.restart(functools.partial(self._register, bookie_id))
        else:
            self.net.restart(bookie_id)
            self._register(bookie_id)

    def heal_all(self, *, keep_held: bool = False) -> None:
        """End every fault: restart, resume, reconnect (``keep_held``: bookies a scenario
        holds down stay down)."""
        self.net.heal()
        self.net.faults = dataclasses.replace(self.net.faults, drop=0.0, duplicate=0.0)
        if not keep_held:
            self.held.clear()
        for bookie_id, bookie in self.bookies.items():
            if bookie_id in self.held:
                continue
            if isinstance(bookie, EngineBookie):
                bookie.disk.heal()
                if bookie.failed:  # restarted, as its failing health check asks
                    self.crash(bookie_id)
            if not bookie.up:
                self.restart(bookie_id)
            if bookie.paused:
                self.net.resume(bookie_id)
        self.paused.clear()
        # A supervisor starts again a bookie whose start (under way now, begun before the
        # heal) fails, as systemd's Restart= would.
        self._supervisor = asyncio.ensure_future(self.all_up())


class Nemesis:
    """Injects bookie faults at random times, at most ``max_faulty`` bookies at once."""

    def __init__(self, world: World, max_faulty: int) -> None:
        self.world = world
        self.max_faulty = max_faulty

    async def run(self) -> None:
        """Inject faults until cancelled."""
        world, rng = self.world, self.world.rng
        while True:
            await asyncio.sleep(rng.uniform(0.005, 0.25))
            faulty = [
                b
                for b, s in world.bookies.items()
                if (not s.up or s.paused or _failed(s)) and b not in world.held
            ]
            down = len(faulty) + len(world.held)
            healthy = [b for b in world.bookies if b not in faulty and b not in world.held]
            action = rng.random()
            if faulty and (down >= self.max_faulty or action < 0.4):
                victim = rng.choice(faulty)
                if world.bookies[victim].paused:
                    world.net.resume(victim)
                else:
                    if _failed(world.bookies[victim]):
                        world.crash(victim)  # a failed journal takes a restart
                    world.restart(victim)
            elif down >= self.max_faulty:
                continue
            elif healthy and action < 0.65:
                world.crash(rng.choice(healthy))
            elif healthy and action < 0.85:
                world.net.pause(rng.choice(healthy))
            elif world.client_names:
                client, bookie = rng.choice(world.client_names), rng.choice(list(world.bookies))
                world.net.partition(client, bookie)
                world.loop.call_later(rng.uniform(0.05, 2.0), world.net.heal, client, bookie)


def _failed(bookie: Bookie) -> bool:
    return isinstance(bookie, EngineBookie) and bookie.failed


DISK_FAULT_KINDS = ("write", "sync", "read", "open", "commit", "dirsync", "rename", "unlink")
"""File-system calls the disk nemesis fails with EIO now and then."""


class DiskNemesis(Nemesis):
    """Faults of the engines' disks: a crash planned at one of the next few file-system
    calls (it may fall inside a checkpoint, a replay or a compaction), short bursts of EIO,
    and disks that fill up for a while."""

    async def run(self) -> None:
        """Inject disk faults until cancelled."""
        world, rng = self.world, self.world.rng
        while True:
            await asyncio.sleep(rng.uniform(0.01, 0.3))
            up = [e for e in world.engines if e.up and e.bookie_id not in world.held]
            if not up:
                continue
            engine = rng.choice(up)
            down = sum(1 for b in world.bookies.values() if not b.up or b.paused)
            action = rng.random()
            if action < 0.3 and down < self.max_faulty:
                calls = rng.randint(1, 40)
                engine.disk.crash_after(calls)
                world.trace.log(f"{engine.bookie_id} disk: crash within {calls} calls")
            elif action < 0.6:  # a checkpoint or a compaction fails (entry logs, index)
                kind = rng.choice(("write", "sync", "commit", "read"))
                place = "data.mdb" if kind == "commit" else "entrylogs"
                engine.disk.fail_next(kind, rng.randint(1, 3), place)
                world.trace.log(f"{engine.bookie_id} disk: EIO on next {kind} of {place}")
            elif action < 0.7:
                kind = rng.choice(DISK_FAULT_KINDS)
                engine.disk.fail_next(kind, rng.randint(1, 3))
                world.trace.log(f"{engine.bookie_id} disk: EIO on next {kind}")
            elif action < 0.75:  # lasting: a failing disk, or bad sectors under an entry log
                if rng.random() < 0.5:
                    kind = rng.choice(DISK_FAULT_KINDS)
                    engine.disk.fail_next(kind, 1000)
                    world.trace.log(f"{engine.bookie_id} disk: EIO on every {kind} from now")
                else:
                    logs = engine.disk.files_in(engine.config.data_dir / "entrylogs")
                    if logs:
                        bad = rng.choice(logs)
                        engine.disk.break_file(bad)
                        world.trace.log(f"{engine.bookie_id} disk: bad sectors in {bad.name}")
            else:
                room = rng.randint(0, 4096)
                engine.disk.capacity = engine.disk.used() + room
                world.trace.log(f"{engine.bookie_id} disk: full ({room} bytes left)")
                world.loop.call_later(rng.uniform(0.05, 1.0), _unfill, engine.disk)


def _unfill(disk: SimDisk) -> None:
    disk.capacity = None


async def cancellable(world: World, who: str, what: str, call: Awaitable[Any]) -> Any:
    """:func:`guard`, except that the call may be cancelled at a random moment (with
    probability ``world.cancel_chance``), as ``asyncio.wait_for``, a service shutting down
    or a closing event loop would; a call cancelled so returns None."""
    task = asyncio.ensure_future(call)
    cancelled: list[bool] = []
    if world.cancel_chance and world.rng.random() < world.cancel_chance:
        world.loop.call_later(
            world.rng.uniform(0.0, 0.1), _cancel, world, task, who, what, cancelled
        )
    try:
        result = await guard(world, who, task)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # this caller is being cancelled, not only its call
        return None
    if cancelled and not task.cancelled() and task.exception() is None:
        # Cancelled while it waited, it must end cancelled (or fail): a call that returns
        # as if nothing happened took the cancellation meant for it for something else's.
        world.history.violate("cancel_swallowed", f"{who}: {what} returned after its cancel")
    return result


async def into_a_burst(world: World, most: int = 60) -> None:
    """Wait until something next happens (a timer fires) and up to ``most`` loop iterations
    into what follows. Faults timed by the clock alone land while every task waits (the
    clock jumps from one timer to the next): this lands them in the middle of a reaction,
    where a task may be half way through winding something down."""
    await world.loop.next_burst()
    for _ in range(world.rng.randint(0, most)):
        await asyncio.sleep(0)


def _cancel(
    world: World, task: asyncio.Future[Any], who: str, what: str, cancelled: list[bool]
) -> None:
    if not task.done():
        world.trace.log(f"{who} CANCEL {what}")
        task.cancel()
        cancelled.append(True)


async def guard(world: World, who: str, call: Awaitable[Any]) -> Any:
    """Await a protocol call; record a foreign exception; return None on any error."""
    try:
        return await call
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        world.trace.log(f"{who} ERROR {type(exc).__name__}: {exc}")
        world.history.on_error(who, exc)
        return None


__all__ = ["KEY", "TIMEOUTS", "DiskNemesis", "Nemesis", "World", "cancellable", "guard"]

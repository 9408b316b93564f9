"""Scenarios: the real protocol code (writer, recovery, reader) driven through faults.

Each scenario is a coroutine over a :class:`tests.sim.world.World`; every choice it makes
comes from the loop's seeded RNG, and a :class:`Nemesis` crashes, restarts, pauses and
partitions bookies while it runs (log scenarios live in tests/sim/log_scenarios.py, the
archive job's publish step on a host that loses power in tests/sim/archive_scenarios.py).
:func:`run_schedule` runs one seed: the scenario, then the *final phase*
(heal every fault, recover every ledger with a fresh client, read each one with two fresh
readers) and the invariant checks of tests/sim/invariants.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import ExitStack, contextmanager, suppress
from typing import Any

import structlog

from tests.sim.archive_scenarios import ARCHIVE_SCENARIOS
from tests.sim.engine import EngineTunables
from tests.sim.invariants import LedgerRecord, Violation
from tests.sim.log_scenarios import LOG_SCENARIOS, log_final_phase
from tests.sim.loop import Event, SimDeadlock, SimLoop, SimStepLimit, _cancel_all
from tests.sim.network import FaultConfig
from tests.sim.producer_scenarios import PRODUCER_SCENARIOS
from tests.sim.register_scenarios import REGISTER_SCENARIOS
from tests.sim.sm_scenarios import SM_SCENARIOS
from tests.sim.world import KEY, DiskNemesis, Nemesis, World, guard
from walog import mutations
from walog.aio import AsyncClient
from walog.errors import WalogError
from walog.ledger import recovery as recovery_module
from walog.ledger.context import LedgerContext
from walog.ledger.create import create_ledger
from walog.ledger.options import LedgerOptions
from walog.ledger.reader import AsyncLedgerReader
from walog.ledger.recovery import recover
from walog.ledger.writer import AsyncLedgerWriter
from walog.metadata.layout import LedgerMetadata
from walog.wire.durability import Durability

SCENARIO_LIMIT_S = 120.0
"""Virtual seconds a scenario may run before its tasks are stopped."""
FINAL_LIMIT_S = 600.0
"""Virtual seconds the final phase (recover + read everything) may take."""


# -- actors -------------------------------------------------------------------------------


def _record_ack(world: World, who: str, record: LedgerRecord, data: bytes) -> Callable[..., None]:
    def done(fut: asyncio.Future[int]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            world.history.on_error(who, exc)
            return
        world.trace.log(f"{who} ACK L{record.ledger_id} e{fut.result()}")
        world.history.on_ack(who, record, fut.result(), data)

    return done


async def write_entries(
    world: World,
    who: str,
    writer: AsyncLedgerWriter,
    record: LedgerRecord,
    count: int,
    *,
    force_chance: float = 0.0,
) -> bool:
    """Append ``count`` entries in random bursts; False once the writer refuses."""
    rng = world.rng
    sent = 0
    while sent < count:
        burst = min(count - sent, rng.randint(1, 6))
        futures = []
        for _ in range(burst):
            data = f"{who}:{record.ledger_id}:{sent}".encode()
            try:
                future = writer.append_nowait(data)
            except WalogError as exc:
                world.trace.log(f"{who} append refused: {type(exc).__name__}")
                return False
            future.add_done_callback(_record_ack(world, who, record, data))
            futures.append(future)
            sent += 1
        if rng.random() < 0.5:
            await asyncio.wait(futures)
        else:
            await asyncio.sleep(rng.uniform(0.0, 0.1))
        if force_chance and rng.random() < force_chance:
            synced = await guard(world, who, writer.force())
            if synced is not None:
                world.trace.log(f"{who} FORCE L{record.ledger_id} -> {synced}")
                world.history.on_force(record, synced)
    return True


async def close_writer(
    world: World, who: str, writer: AsyncLedgerWriter, record: LedgerRecord
) -> None:
    """Close the writer's ledger and record the last entry it closed at."""
    try:
        await writer.close()
    except WalogError as exc:
        world.trace.log(f"{who} close failed: {type(exc).__name__}: {exc}")
        return
    except Exception as exc:
        world.history.on_error(who, exc)
        return
    world.trace.log(f"{who} CLOSED L{record.ledger_id} at {writer.metadata.last_entry_id}")
    world.history.on_close(who, record, writer.metadata.last_entry_id)


async def recoverer(world: World, who: str, record: LedgerRecord, delay: float) -> None:
    """A reader that fences and recovers the ledger after ``delay`` seconds."""
    await asyncio.sleep(delay)
    ctx = world.client(who)
    result = await guard(world, who, recover(ctx, record.ledger_id, KEY))
    if result is not None:
        metadata, _version = result
        world.trace.log(f"{who} RECOVERED L{record.ledger_id} at {metadata.last_entry_id}")
        world.history.on_close(who, record, metadata.last_entry_id)


async def tailer(world: World, who: str, record: LedgerRecord) -> None:
    """A non-fencing reader that follows the LAC and reads every confirmed entry."""
    ctx = world.client(who)
    opened = await guard(world, who, ctx.read_metadata(record.ledger_id))
    if opened is None:
        return
    reader = AsyncLedgerReader(ctx, opened[0], opened[1], KEY)
    next_entry = 0
    while True:
        lac = await guard(world, who, reader.wait_last_add_confirmed(next_entry - 1, 1.0))
        if lac is not None and lac >= next_entry:
            entries = await guard(world, who, reader.read(next_entry, lac))
            for entry in entries or []:
                world.history.on_read(who, record, entry.entry_id, entry.data)
                next_entry = entry.entry_id + 1
        if reader.is_closed and next_entry > reader.last_add_confirmed:
            await reader.close()
            return


async def new_ledger(
    world: World,
    who: str,
    ctx: LedgerContext,
    durability: Durability = Durability.PERSISTENT,
    *,
    full_ack: bool = False,
) -> tuple[AsyncLedgerWriter, LedgerRecord]:
    """Create a ledger with quorums drawn from the seed (E=Qw for VOLATILE; Qa=Qw for
    ``full_ack``)."""
    rng = world.rng
    ensemble = rng.randint(2, min(4, len(world.bookies)))
    write = ensemble if durability is Durability.VOLATILE else rng.randint(2, ensemble)
    ack = write if full_ack else (rng.randint(1, write) if write > 2 else 2)
    options = LedgerOptions(ensemble, write, ack, durability)
    writer = await create_ledger(ctx, options, placement=world.placement())
    world.trace.log(f"{who} created L{writer.ledger_id} E={ensemble} Qw={write} Qa={ack}")
    return writer, world.history.ledger(writer.metadata)


# -- scenarios ----------------------------------------------------------------------------


async def writer_under_faults(world: World) -> None:
    """One writer appends while bookies crash, pause and get cut off; then it closes."""
    ctx = world.client("w")
    writer, record = await new_ledger(world, "w", ctx)
    if await write_entries(world, "w", writer, record, world.rng.randint(2, 14)):
        await close_writer(world, "w", writer, record)


async def writer_crash(world: World) -> None:
    """The writer dies mid-flight; one or two readers recover the ledger."""
    rng = world.rng
    ctx = world.client("w")
    writer, record = await new_ledger(world, "w", ctx)
    work = asyncio.ensure_future(write_entries(world, "w", writer, record, rng.randint(2, 14)))
    await asyncio.sleep(rng.uniform(0.0, 0.2))
    work.cancel()
    await world.crash_client(ctx)
    await asyncio.gather(
        *(recoverer(world, f"r{i}", record, rng.uniform(0, 0.3)) for i in range(rng.randint(1, 2)))
    )


async def recovery_races_writer(world: World) -> None:
    """Recoverers fence the ledger while its writer keeps appending and then closes."""
    rng = world.rng
    ctx = world.client("w")
    writer, record = await new_ledger(world, "w", ctx)

    async def write_then_close() -> None:
        if await write_entries(world, "w", writer, record, rng.randint(3, 16)):
            await close_writer(world, "w", writer, record)

    await asyncio.gather(
        write_then_close(),
        *(recoverer(world, f"r{i}", record, rng.uniform(0, 0.3)) for i in range(rng.randint(1, 2))),
    )


async def tailing_reader(world: World) -> None:
    """A non-fencing reader tails the ledger while the writer appends, then closes."""
    rng = world.rng
    ctx = world.client("w")
    writer, record = await new_ledger(world, "w", ctx)
    tail = asyncio.ensure_future(tailer(world, "t", record))
    if await write_entries(world, "w", writer, record, rng.randint(2, 12)):
        await close_writer(world, "w", writer, record)
    else:
        await recoverer(world, "r", record, 0.0)
    await tail


async def volatile_force(world: World) -> None:
    """A VOLATILE ledger forced now and then while bookies crash and lose the unsynced;
    half the time closed straight after the last append (the close must force itself)."""
    ctx = world.client("w")
    writer, record = await new_ledger(world, "w", ctx, Durability.VOLATILE)
    count = world.rng.randint(2, 12)
    if await write_entries(world, "w", writer, record, count, force_chance=0.4):
        if world.rng.random() < 0.5:
            synced = await guard(world, "w", writer.force())
            if synced is not None:
                world.history.on_force(record, synced)
        await close_writer(world, "w", writer, record)


async def ensemble_change_then_crash(world: World) -> None:
    """A bookie dies while a burst of entries is on the wire, the writer moves to a new
    fragment (resending entries that still carry an old LAC), then the writer dies too and
    readers recover the ledger while the lost bookie is still down."""
    rng = world.rng
    ctx = world.client("w")
    # Qa = Qw makes a write-back need the lost bookie whenever it is in the write set.
    writer, record = await new_ledger(world, "w", ctx, full_ack=rng.random() < 0.5)
    await write_entries(world, "w", writer, record, rng.randint(0, 6))
    work = asyncio.ensure_future(write_entries(world, "w", writer, record, rng.randint(1, 8)))
    await asyncio.sleep(rng.uniform(0.0, 0.01))
    victim = rng.choice(writer.metadata.last_ensemble)
    world.held.add(victim)  # down until the recoveries are over
    world.crash(victim)
    await asyncio.sleep(rng.uniform(0.0, 0.5))
    work.cancel()
    await world.crash_client(ctx)
    await asyncio.gather(
        *(recoverer(world, f"r{i}", record, rng.uniform(0, 0.3)) for i in range(rng.randint(1, 2)))
    )
    world.held.discard(victim)
    world.restart(victim)


async def disk_trouble(world: World) -> None:
    """Rounds of many ledgers at once: writers append to them and die, then readers
    recover them all (a storm of fences and write-backs), and about half of them are
    deleted (the bookies collect them and compact what stays), while the bookies' disks
    fail their checkpoints and reads, and the bookies crash. Every fence and PERSISTENT add
    a bookie answered must survive its crashes (the bookie rules of tests/sim/engine.py)."""
    rng = world.rng
    for term in range(rng.randint(1, 3)):
        records, writers, clients = [], [], []
        for n in range(rng.randint(3, 8)):
            who = f"w{term}.{n}"
            clients.append(ctx := world.client(who))
            made = await guard(world, who, new_ledger(world, who, ctx))
            if made is not None:
                records.append(made[1])
                writers.append(write_entries(world, who, made[0], made[1], rng.randint(1, 6)))
        await asyncio.gather(*writers)
        for ctx in clients:
            await world.crash_client(ctx)
        for engine in world.engines:  # checkpoints that fail during the recoveries
            if rng.random() < 0.5:
                kind = rng.choice(("write", "sync", "commit"))
                engine.disk.fail_next(kind, 1, "data.mdb" if kind == "commit" else "entrylogs")
        await asyncio.gather(
            *(
                recoverer(world, f"r{term}.{n}.{i}", record, rng.uniform(0.0, 0.5))
                for n, record in enumerate(records)
                for i in range(rng.randint(1, 2))
            )
        )
        # Some go: the bookies' collectors delete them and compaction moves what stays.
        doomed = [r for r in records if rng.random() < 0.5]
        cleaner = world.async_client(f"gc{term}")
        for record in doomed:
            if not await guard(world, "gc", _deleted(cleaner, record.ledger_id)):
                continue
            del world.history.ledgers[record.ledger_id]
            world.trace.log(f"gc DELETED L{record.ledger_id}")
        await asyncio.sleep(rng.uniform(0.0, 3.0))


async def _deleted(client: AsyncClient, ledger_id: int) -> bool:
    await client.delete_ledger(ledger_id)
    return True


Scenario = Callable[[World], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {
    **LOG_SCENARIOS,
    **SM_SCENARIOS,
    **ARCHIVE_SCENARIOS,
    "writer_under_faults": writer_under_faults,
    "writer_crash": writer_crash,
    "recovery_races_writer": recovery_races_writer,
    "tailing_reader": tailing_reader,
    "volatile_force": volatile_force,
    "ensemble_change_then_crash": ensemble_change_then_crash,
    "disk_trouble": disk_trouble,
}
NAMED_SCENARIOS: dict[str, Scenario] = {**SCENARIOS, **REGISTER_SCENARIOS, **PRODUCER_SCENARIOS}
"""Every scenario a caller may name; a seed alone draws from :data:`SCENARIOS` only, so
adding one here leaves every seed's schedule as it was."""


# -- one schedule -------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """The result of one schedule."""

    seed: int
    scenario: str
    params: str
    violations: list[Violation]
    trace: list[Event]

    @property
    def ok(self) -> bool:
        """True when no rule broke."""
        return not self.violations

    def report(self, last_events: int = 200) -> str:
        """A readable failure report: seed, scenario, violations and the end of the trace."""
        lines = [f"seed={self.seed} scenario={self.scenario} {self.params}"]
        lines += [f"  VIOLATION {v}" for v in self.violations]
        events = self.trace[-last_events:]
        if len(self.trace) > len(events):
            lines.append(f"  ... {len(self.trace) - len(events)} earlier events")
        lines += [f"  {t:11.6f}  {text % args if args else text}" for t, text, args in events]
        return "\n".join(lines)


async def _final_phase(world: World) -> None:
    """Heal everything, recover every ledger, read each with two fresh readers, check."""
    world.trace.log("FINAL heal all, recover and read every ledger")
    world.heal_all()
    if not await world.all_up():
        down = sorted(i for i, b in world.bookies.items() if not b.up)
        world.history.violate("stalled", f"bookies {down} did not come back after healing")
    closed: dict[int, LedgerMetadata] = {}
    contents: dict[int, list[list[tuple[int, bytes]]]] = {}
    for ledger_id in sorted(world.history.ledgers):
        auditor = world.client(f"audit{ledger_id}")
        result = await guard(world, "audit", recover(auditor, ledger_id, KEY))
        if result is None:
            continue
        metadata, version = result
        closed[ledger_id] = metadata
        contents[ledger_id] = []
        for i in range(2):
            reader = AsyncLedgerReader(world.client(f"reader{i}"), metadata, version, KEY)
            last = metadata.last_entry_id
            entries = [] if last < 0 else await guard(world, "reader", reader.read(0, last))
            if entries is None:
                world.history.violate("acked_entry_lost", f"L{ledger_id} unreadable to {last}")
                entries = []
            contents[ledger_id].append([(e.entry_id, e.data) for e in entries])
    world.history.check_final(closed, contents)
    await log_final_phase(world)
    for engine in world.engines:
        engine.check_rules("at the end")


async def _schedule(world: World, scenario: Scenario, max_faulty: int, chaos_s: float) -> None:
    if not await world.all_up():
        world.history.violate("stalled", "the bookies did not start")
        return
    nemesis = Nemesis(world, max_faulty)
    chaos = asyncio.ensure_future(nemesis.run())
    disks = asyncio.ensure_future(
        DiskNemesis(world, max_faulty).run() if world.engines else _idle()
    )

    async def calm_down() -> None:
        await asyncio.sleep(chaos_s)
        chaos.cancel()
        disks.cancel()
        world.trace.log("chaos over")
        world.heal_all(keep_held=True)

    calm = asyncio.ensure_future(calm_down())
    try:
        await asyncio.wait_for(scenario(world), SCENARIO_LIMIT_S)
    except TimeoutError:
        world.history.violate(
            "stalled",
            f"the scenario did not finish {SCENARIO_LIMIT_S - chaos_s:.0f}s after every "
            "fault was healed",
        )
    finally:
        calm.cancel()
        chaos.cancel()
        disks.cancel()
        await asyncio.gather(chaos, disks, calm, return_exceptions=True)
    await asyncio.wait_for(_final_phase(world), FINAL_LIMIT_S)


async def _idle() -> None:
    """Nothing to do (a world without engines has no disks to fault)."""


# Protocol tunables drawn per schedule: small windows and batches put their boundaries
# inside the simulator's small ledgers (and cost less), the defaults are tried too.
TUNABLES: dict[str, tuple[int, ...]] = {
    # The last value of each is the production one. READ_AHEAD must be at least 2.
    "READ_AHEAD": (2, 3, 8, recovery_module.READ_AHEAD),
    "WRITE_BACK_BATCH": (1, 4, recovery_module.WRITE_BACK_BATCH),
    "BULK_READ": (1, 4, recovery_module.BULK_READ),
}


@contextmanager
def _tunables(rng: random.Random, drawn: bool) -> Iterator[str]:
    chosen = {name: rng.choice(values) for name, values in TUNABLES.items()}
    if not drawn:
        chosen = {name: values[-1] for name, values in TUNABLES.items()}
    saved = {name: getattr(recovery_module, name) for name in chosen}
    for name, value in chosen.items():
        setattr(recovery_module, name, value)
    try:
        yield " ".join(f"{k.lower()}={v}" for k, v in chosen.items())
    finally:
        for name, value in saved.items():
            setattr(recovery_module, name, value)


_current_trace: list[World] = []


def _to_trace(_logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
    """structlog processor: protocol log lines go into the schedule's trace, nowhere else."""
    if _current_trace and method != "debug":
        text = event.pop("event", "")
        extra = " ".join(f"{k}={v}" for k, v in sorted(event.items()))
        _current_trace[-1].trace.log(f"log {method} {text} {extra}")
    raise structlog.DropEvent


@contextmanager
def _logs_into_trace(world: World) -> Iterator[None]:
    """Log lines of the schedule go into its trace: the bookie's (structlog, info and up)
    and the library's (standard logging under ``walog``, warnings and up)."""
    saved = structlog.get_config()
    structlog.configure(processors=[_to_trace], cache_logger_on_first_use=False)
    _current_trace.append(world)
    handler = _TraceHandler(world)
    library = logging.getLogger("walog")
    library.addHandler(handler)
    propagate, library.propagate = library.propagate, False
    try:
        yield
    finally:
        library.propagate = propagate
        library.removeHandler(handler)
        _current_trace.pop()
        structlog.configure(**saved)


class _TraceHandler(logging.Handler):
    """Standard logging records into a schedule's trace."""

    def __init__(self, world: World) -> None:
        super().__init__(logging.WARNING)
        self._world = world

    def emit(self, record: logging.LogRecord) -> None:
        self._world.trace.log(
            "log %s %s %s", record.levelname.lower(), record.name, record.getMessage()
        )


@contextmanager
def _seeded_uuids(seed: int) -> Iterator[None]:
    """``uuid.uuid4`` drawn from the seed (election tokens and the like end up in the trace,
    and a replay must print the same trace); a generator of its own, so that the global
    one's draws stay as they were."""
    rng = random.Random(seed)
    real = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = real


def run_schedule(
    seed: int,
    scenario: str | None = None,
    *,
    mutations_on: frozenset[str] = frozenset(),
    draw_tunables: bool = True,
    engine: bool = False,
    cancel: bool = False,
) -> Outcome:
    """Run one schedule: the seed picks the scenario (unless named), sizes, faults and the
    protocol tunables of :data:`TUNABLES` (the production values when not
    ``draw_tunables``). ``engine``: the bookies run the real storage engine on simulated
    disks (tests/sim/engine.py), its settings drawn from the seed too. ``cancel``: client
    calls (taking a log over, rolls, closes, truncation, retention) are cancelled at random
    moments (:func:`tests.sim.world.cancellable`)."""
    loop = SimLoop(seed)
    rng = loop.rng
    name = scenario or rng.choice(sorted(SCENARIOS))
    faults = FaultConfig(
        delay_s=(0.0002, rng.choice([0.002, 0.01, 0.05])),
        drop=rng.choice([0.0, 0.0, 0.01, 0.05]),
        duplicate=rng.choice([0.0, 0.02]),
        # A real add stream never reorders, and force() relies on that (it syncs what the
        # stream delivered before it); reordering is tried where nothing depends on it.
        reorder=name != "volatile_force" and rng.random() < 0.1,
    )
    bookies = rng.randint(3, 5)
    max_faulty = rng.choice([1, 1, 2])
    chaos_s = rng.uniform(0.1, 3.0)
    tunables = EngineTunables.draw(rng) if engine else None
    world = World(loop, bookies, faults, tunables)
    if cancel:
        world.cancel_chance = rng.choice([0.1, 0.3, 0.6])
    world.meta.lost_answers = rng.choice([0.0, 0.0, 0.05, 0.2])
    before = mutations.active()
    # Library code draws jitter from the global RNG (tenacity's random waits): seed it too.
    global_rng_state = random.getstate()
    random.seed(seed)
    asyncio.set_event_loop(loop)
    try:
        with ExitStack() as stack:
            drawn = stack.enter_context(_tunables(rng, draw_tunables))
            params = (
                f"bookies={bookies} max_faulty={max_faulty} drop={faults.drop} "
                f"dup={faults.duplicate} reorder={faults.reorder} delay<={faults.delay_s[1]} "
                f"chaos={chaos_s:.2f}s lost_answers={world.meta.lost_answers} {drawn} "
                f"mutations={sorted(mutations_on) or '-'}"
                + (f" cancel={world.cancel_chance}" if cancel else "")
                + (f" engine={tunables}" if tunables is not None else "")
            )
            world.trace.log(f"START {name} {params}")
            mutations.set_enabled(mutations_on)
            stack.enter_context(_logs_into_trace(world))
            stack.enter_context(_seeded_uuids(seed))
            try:
                loop.run_until_complete(
                    _schedule(world, NAMED_SCENARIOS[name], max_faulty, chaos_s)
                )
            except (SimDeadlock, SimStepLimit, TimeoutError) as exc:
                world.history.violate("stuck", f"{type(exc).__name__}: {exc}")
            with suppress(SimDeadlock, SimStepLimit):
                _cancel_all(loop)
    finally:
        random.setstate(global_rng_state)
        mutations.set_enabled(before)
        asyncio.set_event_loop(None)
        loop.close()
    return Outcome(seed, name, params, list(world.history.violations), world.trace.events)


__all__ = ["NAMED_SCENARIOS", "SCENARIOS", "Nemesis", "Outcome", "World", "run_schedule"]

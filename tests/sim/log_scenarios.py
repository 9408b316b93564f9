"""Log scenarios: the real log layer (walog.log) driven through takeovers, rolls and faults.

Two clients duel for one log (each takes over, appends, may crash or take over again),
ledgers roll every few entries, a truncator cuts the head, a tailing reader follows. The
final phase heals everything, takes the log over once more (fencing the last two ledgers)
and reads it from the start with two fresh readers; tests/sim/log_invariants.py checks the
outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tests.sim.log_invariants import LogAck
from tests.sim.world import World, cancellable, guard
from walog.aio import AsyncClient
from walog.errors import DataLossError, WalogError
from walog.log.async_log import AsyncLog
from walog.log.position import Position, ledger_start
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.log.writer import AsyncLogWriter
from walog.wire.durability import Durability

LOG = "log"
FINAL_READ_IDLE_S = 3.0
"""A final reader stops after this long without a new record (everything is closed)."""


async def _open_log(
    world: World,
    who: str,
    client: AsyncClient | None = None,
    retention: RetentionPolicy | None = None,
) -> AsyncLog | None:
    options = world.log_options
    client = client or world.async_client(who)
    log: AsyncLog | None = await guard(
        world,
        who,
        client.open_log(
            LOG,
            ensemble_size=options[0],
            write_quorum=options[1],
            ack_quorum=options[2],
            roll_policy=RollPolicy(max_entries=options[3]),
            durability=options[4],
            retention=retention,
            override_config=retention is not None,  # a policy of this process's own
        ),
    )
    return log


async def append_records(world: World, who: str, writer: AsyncLogWriter, count: int) -> bool:
    """Append ``count`` records in random bursts; False once the writer refuses."""
    rng = world.rng
    for index in range(count):
        data = f"{who}@{writer.epoch}:{index}".encode()
        try:
            future = writer.append_nowait(data)
        except WalogError as exc:
            world.trace.log(f"{who} log append refused: {type(exc).__name__}")
            return False
        future.add_done_callback(_on_record_done(world, who, writer.epoch, index, data))
        if rng.random() < 0.4:
            await asyncio.wait([future])
        elif rng.random() < 0.5:
            await asyncio.sleep(rng.uniform(0.0, 0.05))
        if world.cancel_chance and rng.random() < 0.1:
            await cancellable(world, who, "roll", writer.roll())
    return True


def _on_record_done(
    world: World, who: str, epoch: int, index: int, data: bytes
) -> Callable[[asyncio.Future[Position]], None]:
    def done(future: asyncio.Future[Position]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            world.history.on_error(who, exc)
            return
        world.trace.log(f"{who} RECORD {future.result()} {data!r}")
        ack = LogAck(who, epoch, index, future.result(), data)
        world.log_history.on_ack(ack, world.history.violate)

    return done


async def log_writer(world: World, who: str, delay: float) -> None:
    """Take over the log (once or twice, each time as a new client process), append, then
    close or crash. A new process per takeover keeps the writer-close rule checkable: the
    client that created a ledger never completes a recovery of it that another started
    (tests/sim/invariants.py)."""
    rng = world.rng
    await asyncio.sleep(delay)
    for term in range(rng.randint(1, 2)):
        client = world.async_client(f"{who}.{term}")
        log = await _open_log(world, who, client)
        writer = await cancellable(world, who, "open_writer", log.open_writer()) if log else None
        if writer is None:
            return
        world.trace.log(f"{who} TOOK OVER epoch {writer.epoch} ledger {writer.ledger_id}")
        writer._clock = _skewed_clock(who, term)
        count = rng.randint(1, 8)
        ok = await append_records(world, who, writer, count)
        if rng.random() < 0.25:
            await world.crash_client(client.ctx)
            return
        if ok and await guard(world, who, _flushed(writer)):
            world.log_history.on_flushed(who, writer.epoch, count)
            if rng.random() < 0.25:  # what the flush made durable must last without a close
                await world.crash_client(client.ctx)
                return
        await cancellable(world, who, "close", writer.close())
        await asyncio.sleep(rng.uniform(0.0, 0.3))


CLOCK_SKEW_S = 5.0
"""How far each writer process's clock runs ahead of or behind the virtual clock."""


def _skewed_clock(who: str, term: int) -> Callable[[], float]:
    """A writer process's wall clock: the virtual clock, :data:`CLOCK_SKEW_S` ahead or
    behind, alternating between processes (drawn from nothing, so schedules stay as
    they were): each takeover may follow a predecessor whose clock ran 10 s ahead."""
    loop = asyncio.get_running_loop()
    skew = CLOCK_SKEW_S if (sum(map(ord, who)) + term) % 2 else -CLOCK_SKEW_S
    return lambda: 1.7e9 + loop.time() + skew


async def _flushed(writer: AsyncLogWriter) -> bool:
    await writer.flush()
    return True


async def log_tailer(world: World, who: str, done: asyncio.Event) -> None:
    """A reader from the start that records everything it reads until told to stop."""
    log = await _open_log(world, who)
    reader = await guard(world, who, log.open_reader("earliest")) if log else None
    if reader is None:
        return
    try:
        while True:
            try:
                record = await reader.read_next(timeout=0.5)
            except DataLossError:
                return  # the reader stood in a truncated ledger; nothing to compare
            except WalogError as exc:
                world.trace.log(f"{who} read failed: {type(exc).__name__}: {exc}")
                await asyncio.sleep(0.2)
                continue
            if record is not None:
                world.log_history.on_read(who, record.position, record.data)
            elif done.is_set():
                return
    finally:
        await reader.close()


async def log_truncator(world: World, who: str) -> None:
    """Once, at a random time, truncate before a random acknowledged record (or, in
    schedules that cancel calls, apply a retention policy limiting the log's bytes)."""
    rng = world.rng
    await asyncio.sleep(rng.uniform(0.1, 1.5))
    acks = world.log_history.acks
    if not acks:
        return
    if world.cancel_chance and rng.random() < 0.5:
        policy = RetentionPolicy(max_bytes=rng.randint(1, 200))
        log = await _open_log(world, who, retention=policy)
        if log is not None:
            deleted = await cancellable(world, who, "retention", log.enforce_retention())
            world.trace.log(f"{who} RETENTION {policy}: {deleted} ledger(s)")
        return
    before = rng.choice(acks).position
    log = await _open_log(world, who)
    if log is None:
        return
    world.log_history.on_truncate(before)
    deleted = await cancellable(world, who, "truncate", _truncate(world, who, log, before))
    world.trace.log(f"{who} TRUNCATE before {before}: {deleted} ledger(s)")


async def _truncate(world: World, who: str, log: AsyncLog, before: Position) -> int | None:
    """``log.truncate(before)``. Refused as past the end (an acknowledged record may lie
    past the last add confirmed readers see yet, or a VOLATILE crash lost it), it truncates
    again before the start of the log's last ledger, which deletes the same ledgers (the
    last one always stays), as a user told "the furthest point is ..." would."""
    try:
        return await log.truncate(before)
    except ValueError as exc:
        world.trace.log(f"{who} TRUNCATE refused: {exc}")
    last = (await log.metadata()).last_ledger_id
    if last is None:
        return None
    return await log.truncate(ledger_start(last))


async def log_duel(world: World, durability: Durability = Durability.PERSISTENT) -> None:
    """Two writers take the log over from each other while a tailer follows it."""
    rng = world.rng
    ensemble = rng.randint(2, min(3, len(world.bookies)))
    write = ensemble if durability is Durability.VOLATILE else rng.randint(2, ensemble)
    quorums = (ensemble, write, rng.randint(1, write))
    world.log_options = (*quorums, rng.randint(1, 4), durability)
    world.log_history.volatile = durability is Durability.VOLATILE
    done = asyncio.Event()
    tail = asyncio.ensure_future(log_tailer(world, "t", done))
    cutter = asyncio.ensure_future(log_truncator(world, "cut"))
    await asyncio.gather(
        log_writer(world, "w1", 0.0), log_writer(world, "w2", rng.uniform(0.0, 0.8))
    )
    done.set()
    await asyncio.gather(tail, cutter)


async def log_final_phase(world: World) -> None:
    """Take the log over once more, read it twice from the start, check the log rules."""
    if not world.log_history.acks and not world.log_history.reads:
        return
    log = await _open_log(world, "final")
    writer = await guard(world, "final", log.open_writer()) if log else None
    if log is None or writer is None:
        world.history.violate("recovery_failed", "the final log takeover failed")
        return
    await guard(world, "final", writer.close())
    reads = []
    stamps: list[float] = []
    for i in range(2):
        reads.append(await _read_all(world, f"lreader{i}", stamps if i == 0 else None))
    if stamps != sorted(stamps):
        at = next(i for i in range(1, len(stamps)) if stamps[i] < stamps[i - 1])
        world.history.violate(
            "log_timestamp_decreased",
            f"record {reads[0][at][0]} is stamped {stamps[at]:.6f}, below "
            f"{stamps[at - 1]:.6f} of the record before it",
        )
    meta = await guard(world, "final", log.metadata())
    ledger_ids = meta.ledger_ids if meta is not None else []
    world.log_history.check_final(ledger_ids, reads, world.history.violate)


async def _read_all(
    world: World, who: str, stamps: list[float] | None = None
) -> list[tuple[Position, bytes]]:
    """Every record from the start (and, into ``stamps``, their timestamps)."""
    log = await _open_log(world, who)
    reader = await guard(world, who, log.open_reader("earliest")) if log else None
    out: list[tuple[Position, bytes]] = []
    if reader is None:
        return out
    while (record := await guard(world, who, reader.read_next(FINAL_READ_IDLE_S))) is not None:
        out.append((record.position, record.data))
        if stamps is not None:
            stamps.append(record.timestamp)
    await reader.close()
    return out


async def log_duel_volatile(world: World) -> None:
    """:func:`log_duel` on a VOLATILE log: what a writer flushed must survive the bookies'
    crashes, which take what was acknowledged only from their page cache."""
    await log_duel(world, Durability.VOLATILE)


LOG_SCENARIOS: dict[str, Callable[[World], Awaitable[None]]] = {
    "log_duel": log_duel,
    "log_duel_volatile": log_duel_volatile,
}

__all__ = ["LOG_SCENARIOS", "append_records", "log_duel", "log_duel_volatile", "log_final_phase"]

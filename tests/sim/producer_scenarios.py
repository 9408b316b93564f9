"""Producer sessions in the simulator: writer processes of one producer take the log over
from each other under the nemesis's faults, each first retrying, with the same seq, every
append the previous ones left in doubt (failed, or never answered before a crash), then
appending new seqs. Checked at the end: no (producer, seq) is twice in the log, and every
position an append or a retry returned is where the log holds that seq
(``log_producer_seq_twice``, ``log_producer_retry_moved`` in docs/correctness.md).

Runs only when named (tests/sim/test_producers.py), so adding it left every seed's schedule
as it was.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

from tests.sim.log_scenarios import FINAL_READ_IDLE_S, LOG
from tests.sim.world import World, cancellable, guard
from walog.aio import AsyncClient
from walog.errors import SequenceError, WalogError
from walog.log.async_log import AsyncLog
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.wire.durability import Durability

PRODUCER = "svc-7"


class Session:
    """The client's side of the producer session: the next seq, the seqs in doubt, and the
    position each seq was first answered with."""

    def __init__(self) -> None:
        self.next_seq = 0
        self.doubt: set[int] = set()
        self.answered: dict[int, Position] = {}
        self.refused: set[int] = set()

    def answer(self, world: World, seq: int, position: Position) -> None:
        first = self.answered.setdefault(seq, position)
        self.doubt.discard(seq)
        if first != position:
            world.history.violate(
                "log_producer_retry_moved", f"seq {seq} answered {first}, then {position}"
            )


async def _open(world: World, client: AsyncClient) -> AsyncLog | None:
    ensemble, write, ack, entries, durability = world.log_options
    log: AsyncLog | None = await guard(
        world,
        "p",
        client.open_log(
            LOG,
            ensemble_size=ensemble,
            write_quorum=write,
            ack_quorum=ack,
            roll_policy=RollPolicy(max_entries=entries),
            durability=durability,
        ),
    )
    return log


async def producer_writer(world: World, session: Session, who: str, delay: float) -> None:
    """Take the log over as the producer (a new client process each term), retry what is in
    doubt, append new seqs; then close, or crash with appends unanswered."""
    rng = world.rng
    await asyncio.sleep(delay)
    for term in range(rng.randint(1, 3)):
        client = world.async_client(f"{who}.{term}")
        log = await _open(world, client)
        if log is None:
            return
        writer = await cancellable(world, who, "open_writer", log.open_writer(producer=PRODUCER))
        if writer is None:
            continue
        world.trace.log(f"{who} TOOK OVER as {PRODUCER} epoch {writer.epoch}")
        seqs = sorted(session.doubt)
        fresh = rng.randint(1, 6)
        seqs += range(session.next_seq, session.next_seq + fresh)
        session.next_seq += fresh
        pending: list[tuple[int, asyncio.Future[Position]]] = []
        for seq in seqs:
            session.doubt.add(seq)
            try:
                pending.append((seq, writer.append_nowait(b"%d" % seq, seq=seq)))
            except SequenceError as exc:  # skipped: a later seq reached the log first
                world.trace.log(f"{who} seq {seq} refused: {exc}")
                session.refused.add(seq)
                session.doubt.discard(seq)
            except WalogError:
                break
        crash = rng.random() < 0.3
        if crash:
            await asyncio.sleep(rng.uniform(0.0, 0.05))
            await world.crash_client(client.ctx)
            return  # what was not answered by now stays in doubt
        for seq, future in pending:
            position = await guard(world, who, future)
            if position is not None:
                session.answer(world, seq, position)
        await cancellable(world, who, "close", writer.close())


async def log_producers(world: World) -> None:
    """Two writer processes of one producer take the log over from each other."""
    rng = world.rng
    ensemble = rng.randint(2, min(3, len(world.bookies)))
    write = rng.randint(2, ensemble)
    world.log_options = (
        ensemble,
        write,
        rng.randint(1, write),
        rng.randint(1, 4),
        Durability.PERSISTENT,
    )
    session = Session()
    await asyncio.gather(
        producer_writer(world, session, "p1", 0.0),
        producer_writer(world, session, "p2", rng.uniform(0.0, 0.8)),
    )
    world.heal_all()
    await world.all_up()
    # One more takeover retries what is still in doubt, then the log is read.
    client = world.async_client("final-producer")
    log = await _open(world, client)
    writer = await guard(world, "final", log.open_writer(producer=PRODUCER)) if log else None
    if log is None or writer is None:
        world.history.violate("recovery_failed", "the final producer takeover failed")
        return
    for seq in sorted(session.doubt):
        # A seq skipped for good (a later one reached the log first) is refused: None.
        position = await guard(world, "final", writer.append(b"%d" % seq, seq=seq))
        if position is not None:
            session.answer(world, seq, position)
    await guard(world, "final", writer.close())
    await _check_log(world, log, session)


async def _check_log(world: World, log: AsyncLog, session: Session) -> None:
    reader = await guard(world, "preader", log.open_reader("earliest"))
    if reader is None:
        return
    where: dict[int, list[Position]] = collections.defaultdict(list)
    while (
        record := await guard(world, "preader", reader.read_next(FINAL_READ_IDLE_S))
    ) is not None:
        if record.producer == PRODUCER and record.seq is not None:
            where[record.seq].append(record.position)
    await reader.close()
    for seq, positions in sorted(where.items()):
        if len(positions) > 1:
            world.history.violate("log_producer_seq_twice", f"seq {seq} at {positions}")
    for seq, position in sorted(session.answered.items()):
        if where.get(seq, [position])[0] != position:
            world.history.violate(
                "log_producer_retry_moved",
                f"seq {seq} answered {position}, in the log at {where[seq]}",
            )
        if seq not in where:
            world.history.violate(
                "log_producer_retry_moved", f"seq {seq} answered {position}, not in the log"
            )
    world.trace.log(f"producer log: {len(where)} seqs, {len(session.answered)} answered")


PRODUCER_SCENARIOS: dict[str, Callable[[World], Awaitable[None]]] = {
    "log_producers": log_producers,
}

__all__ = ["PRODUCER_SCENARIOS", "log_producers"]

"""Many logs in one process: appends to 1 to 1,000 logs at once (``curve-logs``), and
1 to 1,000 idle logs each with a tailing reader (``curve-idle``).

Both use the asyncio API from one process, one client, every log E3/Qw3/Qa2 PERSISTENT
with 100-byte records.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from walog.aio import AsyncClient
from walog.bench.curves import Curve
from walog.bench.scenarios import ENSEMBLE, LOG_BATCH, LOG_WINDOW, RECORD_BYTES, Progress
from walog.bench.stats import Latency, payload
from walog.errors import WalogError
from walog.log.async_log import AsyncLog
from walog.log.position import Position
from walog.log.reader import AsyncLogReader
from walog.log.writer import AsyncLogWriter

LOG_COUNTS = (1, 10, 100, 1000)
"""Logs written at once (``curve-logs``) or kept idle with a reader (``curve-idle``)."""

OPEN_AT_ONCE = 50
"""Logs opened (or closed) concurrently while the curves set up (or tear down)."""

NEAR_ZERO_PCT = 5.0
"""CPU, in percent of one core, that ``curve-idle`` calls near zero for a process."""

LAG_ROUNDS = 5
"""Rounds of one record to every log, after the idle time (``curve-idle``)."""

_STAMP = struct.Struct("<q")


def _noop(_: int) -> None:
    pass


async def _open_logs(
    client: AsyncClient, names: Sequence[str]
) -> list[tuple[AsyncLog, AsyncLogWriter]]:
    """Open (create) each log and a writer on it, :data:`OPEN_AT_ONCE` at a time."""

    async def one(name: str) -> tuple[AsyncLog, AsyncLogWriter]:
        log = await client.open_log(
            name, ensemble_size=ENSEMBLE[0], write_quorum=ENSEMBLE[1], ack_quorum=ENSEMBLE[2]
        )
        return log, await log.open_writer()

    opened: list[tuple[AsyncLog, AsyncLogWriter]] = []
    for start in range(0, len(names), OPEN_AT_ONCE):
        opened += await asyncio.gather(*(one(n) for n in names[start : start + OPEN_AT_ONCE]))
    return opened


async def _close_all(closers: Sequence[Callable[[], Awaitable[None]]]) -> None:
    """Call every coroutine function of ``closers``, :data:`OPEN_AT_ONCE` at a time;
    failures are ignored (the bench is done with them)."""

    async def one(close: Callable[[], Awaitable[None]]) -> None:
        with contextlib.suppress(WalogError):
            await close()

    for start in range(0, len(closers), OPEN_AT_ONCE):
        await asyncio.gather(*(one(c) for c in closers[start : start + OPEN_AT_ONCE]))


async def append_to_many(
    writers: Sequence[AsyncLogWriter], seconds: float, progress: Progress = _noop
) -> tuple[float, Latency]:
    """Append 100-byte records to every writer for ``seconds``: each event-loop turn gives
    every log ``LOG_BATCH // len(writers)`` records (at least one), and at most
    :data:`LOG_WINDOW` records are in flight over all logs.

    Returns:
        Records acknowledged per second, and the latency from a turn's appends to the
        acknowledgement of each log's last record of that turn.
    """
    data = payload(RECORD_BYTES)
    per_log = max(1, LOG_BATCH // len(writers))
    latency = Latency()
    turns: collections.deque[list[asyncio.Future[Position]]] = collections.deque()
    inflight = done = 0

    def timed(started: float) -> Callable[[asyncio.Future[Position]], None]:
        def done_at(future: asyncio.Future[Position]) -> None:
            if not future.cancelled() and future.exception() is None:
                latency.record(time.perf_counter() - started)

        return done_at

    started = time.perf_counter()
    deadline = started + seconds
    while True:
        if time.perf_counter() < deadline and inflight < LOG_WINDOW:
            now = time.perf_counter()
            turn: list[asyncio.Future[Position]] = []
            for writer in writers:
                turn += [writer.append_nowait(data) for _ in range(per_log)]
                turn[-1].add_done_callback(timed(now))
            turns.append(turn)
            inflight += len(turn)
            await asyncio.sleep(0)  # the writers seal this turn's records into entries
            continue
        if not turns:
            break
        oldest = turns.popleft()
        await asyncio.gather(*oldest)
        inflight -= len(oldest)
        done += len(oldest)
        progress(len(oldest))
    return done / (time.perf_counter() - started), latency


async def many_logs(
    client: AsyncClient,
    seconds: float,
    counts: Sequence[int] = LOG_COUNTS,
    progress: Progress = _noop,
) -> Curve:
    """``curve-logs``: aggregate append throughput and p99 latency with ``counts`` logs
    written at once."""
    curve = Curve(
        name="curve-logs",
        title="Appends to many logs at once from one process",
        columns=["logs", "records/s (all logs)", "ack p50 ms", "ack p99 ms", "vs one log"],
        plot=[("records/s (all logs)", "records/s"), ("ack p99 ms", "ms")],
    )
    first: float | None = None
    for count in counts:
        tag = uuid.uuid4().hex[:8]
        opened = await _open_logs(client, [f"bench-many-{tag}-{i}" for i in range(count)])
        writers = [w for _, w in opened]
        try:
            await append_to_many(writers, min(1.0, seconds / 4))  # warm the streams
            rate, latency = await append_to_many(writers, seconds, progress)
        finally:
            await _close_all([w.close for w in writers])
        first = rate if first is None else first
        curve.rows.append(
            [
                count,
                round(rate),
                round(latency.percentile_ms(50.0), 2),
                round(latency.percentile_ms(99.0), 2),
                round(rate / first, 2),
            ]
        )
    curve.notes.append(
        "One client, one event loop. Every log has a writer of its own (E3/Qw3/Qa2, "
        "PERSISTENT); each loop turn appends 100-byte records to every log, 1,024 divided "
        "by the number of logs each (at least one), at most 32,768 in flight in all, for "
        "the scenario's seconds after a short warm-up. A writer packs the records of a turn "
        "into one entry, so the same offered load makes smaller entries the more logs share "
        "it. Latency: from a turn's appends to the acknowledgement of each log's last "
        "record of that turn."
    )
    last = curve.rows[-1]
    curve.bound = (
        f"with {last[0]:,} logs at least 70 % of the one-log throughput (measured: "
        f"{100 * float(last[4] or 0):.0f} %)."
    )
    curve.holds = float(last[4] or 0) >= 0.7
    return curve


async def _drain(readers: Sequence[AsyncLogReader], seen: Latency | None) -> None:
    """Read one record from every reader (``seen``: record its lag from its stamp)."""

    async def one(reader: AsyncLogReader) -> None:
        record = await reader.read_next(timeout=60.0)
        if record is None:
            raise WalogError("a tailing reader saw no record within 60 s")
        if seen is not None:
            (stamp,) = _STAMP.unpack_from(record.data)
            seen.record((time.perf_counter_ns() - stamp) / 1e9)

    await asyncio.gather(*(one(r) for r in readers))


async def _stamped_round(writers: Sequence[AsyncLogWriter]) -> None:
    pad = payload(RECORD_BYTES - _STAMP.size)
    futures = [w.append_nowait(_STAMP.pack(time.perf_counter_ns()) + pad) for w in writers]
    await asyncio.gather(*futures)


async def idle_readers(
    client: AsyncClient,
    idle_s: float,
    cpu_of: Callable[[], dict[str, float]],
    counts: Sequence[int] = LOG_COUNTS,
    progress: Progress = _noop,
) -> Curve:
    """``curve-idle``: logs with an idle writer and a tailing reader each, grown to each
    of ``counts``; at each, the CPU every process used over ``idle_s`` seconds with nothing
    written (``cpu_of()``: CPU seconds by process so far), then the tail lag of
    :data:`LAG_ROUNDS` rounds of one record to every log (the first round apart)."""
    curve = Curve(
        name="curve-idle",
        title="Idle logs with one tailing reader each: CPU while idle, lag when writes start",
        columns=[
            "logs",
            "client CPU % of a core",
            "busiest bookie CPU % of a core",
            "first round lag p50 ms",
            "first round lag p99 ms",
            "later rounds lag p99 ms",
        ],
        plot=[
            ("client CPU % of a core", "% of a core"),
            ("busiest bookie CPU % of a core", "% of a core"),
            ("first round lag p99 ms", "ms"),
            ("later rounds lag p99 ms", "ms"),
        ],
    )
    writers: list[AsyncLogWriter] = []
    readers: list[AsyncLogReader] = []
    tag = uuid.uuid4().hex[:8]
    try:
        for count in counts:
            added = await _open_logs(
                client, [f"bench-idle-{tag}-{i}" for i in range(len(writers), count)]
            )
            new_writers = [w for _, w in added]
            writers += new_writers
            await _stamped_round(new_writers)
            new_readers = [await log.open_reader("earliest") for log, _ in added]
            await _drain(new_readers, None)
            readers += new_readers
            before, started = cpu_of(), time.perf_counter()
            await asyncio.sleep(idle_s)  # the measured idle time: nothing is written
            after, wall = cpu_of(), time.perf_counter() - started
            used = {name: 100 * (after[name] - before[name]) / wall for name in after}
            first, later = Latency(), Latency()
            for lag_round in range(LAG_ROUNDS):
                read = asyncio.ensure_future(_drain(readers, first if lag_round == 0 else later))
                await _stamped_round(writers)
                await read
            bookies = [v for name, v in used.items() if name != "client"]
            curve.rows.append(
                [
                    count,
                    round(used["client"], 2),
                    round(max(bookies, default=0.0), 2),
                    round(first.percentile_ms(50.0), 2),
                    round(first.percentile_ms(99.0), 2),
                    round(later.percentile_ms(99.0), 2),
                ]
            )
            progress(1)
    finally:
        await _close_all([r.close for r in readers] + [w.close for w in writers])
    curve.notes.append(
        f"One client holds, for each log, an open writer and a tailing reader waiting in "
        f"`read_next`. CPU (user + system, from `/proc`) of the client process and of the "
        f"busiest of the three bookies over {idle_s:g} s with nothing written, in percent "
        f"of one core. Then {LAG_ROUNDS} rounds of one stamped record to every log: the lag "
        "from the append to the record coming out of its reader, the first round (the "
        "first write after the idle time) apart from the others."
    )
    worst = max(max(float(row[1] or 0), float(row[2] or 0)) for row in curve.rows)
    curve.bound = (
        f"near zero while idle: each process below {NEAR_ZERO_PCT:g} % of one core "
        f"(highest measured: {worst:.2f} %)."
    )
    curve.holds = worst < NEAR_ZERO_PCT
    return curve


__all__ = ["LOG_COUNTS", "NEAR_ZERO_PCT", "append_to_many", "idle_readers", "many_logs"]

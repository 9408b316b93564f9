"""The read barrier's latency (``walog bench``, next to the append latency).

A log writer appends 100-byte records one at a time while barriers are taken in turn: the
*busy* numbers. Then the writer stops after an append and one barrier follows each of its
acknowledgements: the *idle* numbers, where the barrier waits for the writer's explicit LAC
(``Timeouts.explicit_lac``) because no next entry carries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable

from walog.aio import AsyncClient
from walog.bench.stats import Latency, payload

ENSEMBLE = (3, 3, 2)
RECORD_BYTES = 100
IDLE_SHARE = 0.3
"""The share of the scenario's seconds spent on barriers of an idle writer."""


@dataclasses.dataclass(frozen=True)
class BarrierLatency:
    """Barrier latencies with the writer busy and idle."""

    busy: Latency
    idle: Latency


async def barrier_latency(
    client: AsyncClient, seconds: float, progress: Callable[[int], None] = lambda _: None
) -> BarrierLatency:
    """Barriers of a log with a writer appending one record at a time, then of an idle
    one (see the module's docstring)."""
    data = payload(RECORD_BYTES)
    log = await client.open_log(
        f"bench-barrier-{uuid.uuid4().hex[:8]}",
        ensemble_size=ENSEMBLE[0],
        write_quorum=ENSEMBLE[1],
        ack_quorum=ENSEMBLE[2],
    )
    writer = await log.open_writer()
    busy, idle = Latency(), Latency()
    stop = asyncio.Event()

    async def write() -> None:
        while not stop.is_set():
            await writer.append(data)

    writing = asyncio.create_task(write())
    try:
        await log.read_barrier()  # warm: the first one opens connections
        deadline = time.perf_counter() + seconds * (1 - IDLE_SHARE)
        while (now := time.perf_counter()) < deadline:
            await log.read_barrier()
            busy.record(time.perf_counter() - now)
            progress(1)
        stop.set()
        await writing
        deadline = time.perf_counter() + seconds * IDLE_SHARE
        while time.perf_counter() < deadline:
            await writer.append(data)
            now = time.perf_counter()
            await log.read_barrier()
            idle.record(time.perf_counter() - now)
            progress(1)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await writing
        await writer.close()
    return BarrierLatency(busy, idle)


__all__ = ["BarrierLatency", "barrier_latency"]

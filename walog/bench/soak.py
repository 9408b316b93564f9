"""A long run that watches the bookies' memory: ``walog bench --soak MINUTES``.

Pipelined 1 KiB appends for the whole run, ledger after ledger (each closed after
:data:`LEDGER_ENTRIES` entries, and deleted once two newer ones exist, so the disk stays
bounded and the bookies' garbage collection and compaction run as in service). Every
:data:`SAMPLE_SECONDS` the resident memory of each bookie is read from ``/proc``. Memory
after the warm-up (caches filled, first checkpoints done) is the baseline; the result is
how far each bookie's memory moved from it by the end of the run.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from walog.aio import AsyncClient
from walog.bench.scenarios import Progress, ledger_append
from walog.errors import WalogError

LEDGER_ENTRIES = 200_000
"""Entries per ledger before the soak closes it and starts the next."""
SAMPLE_SECONDS = 5.0
"""Time between two readings of the bookies' memory."""
KEEP_LEDGERS = 2
"""Closed ledgers kept; older ones are deleted."""


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclasses.dataclass(frozen=True)
class Soak:
    """What a soak measured.

    Attributes:
        seconds: length of the run.
        entries: entries confirmed.
        samples: ``(seconds since start, {bookie: RSS MiB})``, every :data:`SAMPLE_SECONDS`.
        warmup: seconds before the baseline sample.
    """

    seconds: float
    entries: int
    samples: list[tuple[float, dict[str, float]]]
    warmup: float

    def baseline(self) -> dict[str, float]:
        """Each bookie's memory at the first sample after the warm-up."""
        for at, rss in self.samples:
            if at >= self.warmup:
                return rss
        return self.samples[-1][1]

    def end(self) -> dict[str, float]:
        """Each bookie's memory at the last sample."""
        return self.samples[-1][1]

    def growth_pct(self) -> dict[str, float]:
        """How far each bookie's memory moved from the baseline by the end, in percent."""
        base, end = self.baseline(), self.end()
        return {name: round((end[name] - base[name]) * 100 / base[name], 1) for name in base}


async def soak(
    client: AsyncClient,
    seconds: float,
    bookies: Mapping[str, int],
    *,
    warmup: float = 60.0,
    progress: Progress = lambda _: None,
) -> Soak:
    """Append for ``seconds``, reading the memory of ``bookies`` (label -> pid) as it goes."""
    samples: list[tuple[float, dict[str, float]]] = []
    started = time.monotonic()

    def sample() -> None:
        samples.append(
            (time.monotonic() - started, {name: rss_mib(pid) for name, pid in bookies.items()})
        )

    sampler = asyncio.create_task(_every(SAMPLE_SECONDS, sample))
    closed: collections.deque[int] = collections.deque()
    entries = 0
    try:
        while (left := seconds - (time.monotonic() - started)) > 0:
            rate = await ledger_append(
                client, left, max_entries=LEDGER_ENTRIES, progress=progress, on_ledger=closed.append
            )
            entries += rate.ops
            while len(closed) > KEEP_LEDGERS:
                with contextlib.suppress(WalogError):
                    await client.delete_ledger(closed.popleft())
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    sample()
    return Soak(time.monotonic() - started, entries, samples, warmup)


async def _every(interval: float, action: Callable[[], None]) -> None:
    while True:
        action()
        await asyncio.sleep(interval)


__all__ = ["Soak", "rss_mib", "soak"]

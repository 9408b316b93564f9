"""A long run that watches the bookies' memory: ``walog bench --soak MINUTES``.

Pipelined 1 KiB appends at :data:`RATE` entries/s for the whole run, ledger after ledger
(each closed after :data:`LEDGER_SECONDS` of entries, deleted once two newer ones exist, so
the disk stays bounded and the bookies' garbage collection and compaction run as in
service; the soak's bookies collect a deleted ledger 30 s after its last write, so the
index and the entry logs reach their steady size within the warm-up). Every
:data:`SAMPLE_SECONDS` the resident memory of each bookie is read from ``/proc``, private
memory (``RssAnon``: the heap, the write cache) apart from mapped files (``RssFile``: the
LMDB index, whose pages the kernel can drop). The mean over the minute after the warm-up
(caches filled, first checkpoints done) is the baseline; the result is how far each
bookie's memory moved from it by the run's last minute.
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

RATE = 5_000
"""Entries per second the soak appends (pipelined, in bursts of one ledger): a steady
service load, not the bookies' limit. At full speed this machine writes about 20 GB of
entries, journaled and then stored, per bookie in ten minutes: a run at full speed measures
the disk and the collection of deleted ledgers more than memory."""
LEDGER_SECONDS = 10.0
"""Each ledger takes this long at :data:`RATE` (``RATE * LEDGER_SECONDS`` entries)."""
SAMPLE_SECONDS = 5.0
"""Time between two readings of the bookies' memory."""
KEEP_LEDGERS = 2
"""Closed ledgers kept; older ones are deleted."""


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of process ``pid`` in MiB: ``VmRSS`` (all of it), ``RssAnon`` (the
    heap and other private memory) or ``RssFile`` (mapped files: the LMDB index)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for process {pid}")


Memory = tuple[float, float]
"""A bookie's resident memory in MiB: (private: heap and the like, mapped files: the index)."""


@dataclasses.dataclass(frozen=True)
class Soak:
    """What a soak measured.

    Attributes:
        seconds: length of the run.
        entries: entries confirmed.
        samples: ``(seconds since start, {bookie: Memory})``, every :data:`SAMPLE_SECONDS`.
        warmup: seconds before the baseline window.
        window: seconds averaged at each end (memory breathes with the write cache, which
            each checkpoint empties: one sample would catch it full or empty at random).
    """

    seconds: float
    entries: int
    samples: list[tuple[float, dict[str, Memory]]]
    warmup: float
    window: float = 60.0

    def _mean(self, first: float, last: float) -> dict[str, Memory]:
        chosen = [rss for at, rss in self.samples if first <= at <= last] or [self.samples[-1][1]]
        return {
            name: (
                sum(rss[name][0] for rss in chosen) / len(chosen),
                sum(rss[name][1] for rss in chosen) / len(chosen),
            )
            for name in chosen[0]
        }

    def baseline(self) -> dict[str, Memory]:
        """Each bookie's mean memory over the window right after the warm-up."""
        return self._mean(self.warmup, self.warmup + self.window)

    def end(self) -> dict[str, Memory]:
        """Each bookie's mean memory over the run's last window."""
        last = self.samples[-1][0]
        return self._mean(max(self.warmup, last - self.window), last)

    def growth_pct(self) -> dict[str, float]:
        """How far each bookie's whole resident memory moved from the baseline to the end,
        in percent."""
        base, end = self.baseline(), self.end()
        return {
            name: round((sum(end[name]) - sum(base[name])) * 100 / sum(base[name]), 1)
            for name in base
        }


async def soak(
    client: AsyncClient,
    seconds: float,
    bookies: Mapping[str, int],
    *,
    warmup: float = 60.0,
    progress: Progress = lambda _: None,
) -> Soak:
    """Append for ``seconds``, reading the memory of ``bookies`` (label -> pid) as it goes."""
    samples: list[tuple[float, dict[str, Memory]]] = []
    started = time.monotonic()

    def sample() -> None:
        memory = {
            name: (rss_mib(pid, "RssAnon"), rss_mib(pid, "RssFile"))
            for name, pid in bookies.items()
        }
        samples.append((time.monotonic() - started, memory))

    sampler = asyncio.create_task(_every(SAMPLE_SECONDS, sample))
    closed: collections.deque[int] = collections.deque()
    entries = 0
    try:
        while (left := seconds - (time.monotonic() - started)) > 0:
            begun = time.monotonic()
            rate = await ledger_append(
                client,
                left,
                max_entries=int(RATE * LEDGER_SECONDS),
                progress=progress,
                on_ledger=closed.append,
            )
            entries += rate.ops
            while len(closed) > KEEP_LEDGERS:
                with contextlib.suppress(WalogError):
                    await client.delete_ledger(closed.popleft())
            pause = min(LEDGER_SECONDS - (time.monotonic() - begun), left)
            if pause > 0:
                await asyncio.sleep(pause)
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    sample()
    return Soak(time.monotonic() - started, entries, samples, warmup, min(60.0, seconds / 4))


async def _every(interval: float, action: Callable[[], None]) -> None:
    while True:
        action()
        await asyncio.sleep(interval)


__all__ = ["Soak", "rss_mib", "soak"]

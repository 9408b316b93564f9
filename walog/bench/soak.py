"""A long run through a log with retention: ``walog bench --soak MINUTES [--soak-rate N]``.

Pipelined 1 KiB appends through a log writer, one record per entry, at :data:`RATE`
entries/s (``--soak-rate``; ``full``: as fast as the writer goes, :data:`WINDOW` in flight)
for the whole run. The log stores a roll policy (:data:`ROLL`: a new ledger every 10 s or
64 MiB) and a retention policy (:data:`RETENTION`: at most 128 MiB of closed ledgers), so
its writer deletes old ledgers after each roll, and the bookies' garbage collection and
compaction run as in service; the soak's bookies scan for deleted ledgers every 10 s.

Every :data:`SAMPLE_SECONDS` it reads each bookie's resident memory from ``/proc``, private
memory (``RssAnon``: the heap, the write cache) apart from mapped files (``RssFile``: the
LMDB index, whose pages the kernel can drop), and its disk (walog.bench.soak_watch): bytes
in its data and journal directories, the file system's free space, read-only or not. The
mean memory over the minute after the warm-up (caches filled, first checkpoints done) is
the baseline; the result is how far each bookie's memory moved from it by the run's last
minute, the disk use minute by minute, its peak, and whether it stayed bounded.

The run fails (:meth:`Soak.failures`) when a bookie process exited, its journal or a
checkpoint failed, the writer failed, or a bookie's disk use kept growing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from walog._tasks import cancel_and_wait
from walog.aio import AsyncClient
from walog.bench.scenarios import ENSEMBLE, ENTRY_BYTES, Progress
from walog.bench.soak_watch import (
    DiskSample,
    FailureWatch,
    WatchedBookie,
    bound,
    by_minute,
    measure_disk,
    peak_mib,
    unbounded,
)
from walog.bench.stats import payload
from walog.errors import WalogError
from walog.log.log_config import LogConfig
from walog.log.position import Position
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.log.retention_runner import RetentionRunner
from walog.log.writer import AsyncLogWriter, LogWriterConfig
from walog.testing import LocalCluster

RATE = 5_000
"""Entries per second the soak appends by default: a steady service load, not the bookies'
limit (``--soak-rate full`` measures that, and the disk and the collection of deleted
ledgers more than memory)."""
WINDOW = 8192
"""Entries appended and not yet acknowledged, at most (8 MiB)."""
ROLL = RollPolicy(max_bytes=64 * 1024 * 1024, max_age=10.0)
"""The log's roll policy: 10 s ledgers at :data:`RATE`, 64 MiB ones at full speed."""
RETENTION = RetentionPolicy(max_bytes=128 * 1024 * 1024)
"""The log's retention: the closed ledgers hold at most 128 MiB (two at :data:`RATE`, one
or two at full speed); older ones are deleted after each roll."""
SAMPLE_SECONDS = 5.0
"""Time between two readings of the bookies' memory and disks."""
PACE_S = 0.01
"""How long a paced run waits when it is ahead of its rate."""


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
        entries: entries acknowledged.
        samples: ``(seconds since start, {bookie: Memory})``, every :data:`SAMPLE_SECONDS`.
        warmup: seconds before the baseline window.
        window: seconds averaged at each end (memory breathes with the write cache, which
            each checkpoint empties: one sample would catch it full or empty at random).
        disks: ``(seconds since start, {bookie: DiskSample})``, taken with the memory.
        problems: what went wrong: a bookie that exited, a storage failure in its log, the
            writer's failure.
        rate: the entries per second asked for (None: full speed).
        ledgers_deleted: ledgers the log's retention deleted after the writer's rolls.
        acknowledged: ``(seconds since start, entries acknowledged by then)``, taken with
            the other samples.
    """

    seconds: float
    entries: int
    samples: list[tuple[float, dict[str, Memory]]]
    warmup: float
    window: float = 60.0
    disks: list[tuple[float, dict[str, DiskSample]]] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    rate: int | None = RATE
    ledgers_deleted: int = 0
    acknowledged: list[tuple[float, int]] = dataclasses.field(default_factory=list)

    def _mean(self, first: float, last: float) -> dict[str, Memory]:
        chosen = [rss for at, rss in self.samples if first <= at <= last] or [self.samples[-1][1]]
        names = set.intersection(*(set(rss) for rss in chosen))
        return {
            name: (
                sum(rss[name][0] for rss in chosen) / len(chosen),
                sum(rss[name][1] for rss in chosen) / len(chosen),
            )
            for name in sorted(names)
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
            if name in end
        }

    def failures(self) -> list[str]:
        """Why the run failed (empty: it did not): :attr:`problems`, then every bookie whose
        disk use kept growing (walog.bench.soak_watch)."""
        return [*self.problems, *unbounded(bound(self.disks, self.warmup))]

    def results(self) -> dict[str, Any]:
        """The measurements as the bench's JSON keys (``soak_*``, ``bookie_rss_*``)."""
        entries_per_s = self.entries / self.seconds if self.seconds > 0 else 0.0
        out: dict[str, Any] = {
            "soak_minutes": round(self.seconds / 60, 1),
            "soak_rate": "full" if self.rate is None else self.rate,
            "soak_entries": self.entries,
            "soak_entries_per_s": round(entries_per_s),
            "soak_ledgers_deleted_by_retention": self.ledgers_deleted,
            "soak_disk_by_minute": [
                {**dataclasses.asdict(row), "max_mib": row.max_mib}
                for row in by_minute(self.disks, self.acknowledged)
            ],
            "soak_disk_peak_mib": (peaks := peak_mib(self.disks)),
            "soak_disk_peak_max_mib": max(peaks.values(), default=0.0),
            "soak_disk_bound_mib": {
                name: {"after_warmup": first, "end": last}
                for name, (first, last) in bound(self.disks, self.warmup).items()
            },
            "soak_bookies_lost": sum(1 for p in self.problems if " exited" in p),
            "soak_failures": self.failures(),
        }
        if self.samples:
            for key, memory in (("after_warmup", self.baseline()), ("end", self.end())):
                out[f"bookie_rss_mib_{key}"] = {
                    name: {"private": round(anon, 1), "mapped_files": round(files, 1)}
                    for name, (anon, files) in memory.items()
                }
            growth = self.growth_pct()
            out["bookie_rss_growth_pct_by_bookie"] = growth
            if growth:
                out["bookie_rss_growth_pct"] = max(growth.values())
        return out


def watched_bookies(cluster: LocalCluster) -> dict[str, WatchedBookie]:
    """The running bookies of a local cluster, as the soak watches them (``bookie-N``)."""
    return {
        f"bookie-{i}": WatchedBookie(
            pid=pid,
            data_dir=cluster.bookie_dir(i),
            journal_dir=cluster.bookie_dir(i) / "journal",
            metrics_url=cluster.metrics_url(i),
            log_path=cluster.log_path(i),
            running=functools.partial(cluster.is_running, i),
        )
        for i in range(len(cluster.bookie_ids))
        if (pid := cluster.pid(i))
    }


class _Watch:
    """The samples of one run, taken every :data:`SAMPLE_SECONDS`; :attr:`broken` is set
    at the first problem (the writer stops then: the run has failed)."""

    def __init__(self, bookies: Mapping[str, WatchedBookie], started: float) -> None:
        self.bookies = dict(bookies)
        self.started = started
        self.memory: list[tuple[float, dict[str, Memory]]] = []
        self.disks: list[tuple[float, dict[str, DiskSample]]] = []
        self.problems: list[str] = []
        self.acknowledged: list[tuple[float, int]] = []
        self.entries = 0
        """Entries acknowledged so far (the writer's loop counts them)."""
        self.broken = asyncio.Event()
        self._logs = {name: FailureWatch(b.log_path) for name, b in self.bookies.items()}
        self._exited: set[str] = set()

    def problem(self, text: str) -> None:
        self.problems.append(text)
        self.broken.set()

    async def sample(self) -> None:
        at = time.monotonic() - self.started
        for name, bookie in self.bookies.items():
            if not bookie.running() and name not in self._exited:
                self._exited.add(name)
                self.problem(f"{name} (pid {bookie.pid}) exited")
            for line in await asyncio.to_thread(self._logs[name].new_failures):
                self.problem(f"{name}: {line.strip()[:300]}")
        if self.broken.is_set():
            return
        self.memory.append(
            (
                at,
                {
                    name: (rss_mib(b.pid, "RssAnon"), rss_mib(b.pid, "RssFile"))
                    for name, b in self.bookies.items()
                },
            )
        )
        disks = await asyncio.gather(
            *(asyncio.to_thread(measure_disk, b) for b in self.bookies.values())
        )
        self.disks.append((at, dict(zip(self.bookies, disks, strict=True))))
        self.acknowledged.append((at, self.entries))

    async def run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(SAMPLE_SECONDS)


async def soak(
    client: AsyncClient,
    seconds: float,
    bookies: Mapping[str, WatchedBookie],
    *,
    rate: int | None = RATE,
    warmup: float = 60.0,
    progress: Progress = lambda _: None,
) -> Soak:
    """Append for ``seconds`` through a new log with :data:`ROLL` and :data:`RETENTION`, at
    ``rate`` entries/s (None: full speed), watching ``bookies`` as it goes."""
    ensemble, write_quorum, ack_quorum = ENSEMBLE
    config = LogConfig(
        ensemble_size=ensemble,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        roll=ROLL,
        retention=RETENTION,
    )
    log = await client.create_log(f"soak-{uuid.uuid4().hex[:8]}", config)
    writer = await log.open_writer(LogWriterConfig(max_records_per_entry=1))
    started = time.monotonic()
    watch = _Watch(bookies, started)
    sampler = asyncio.create_task(watch.run())
    entries = 0
    try:
        entries = await _append(writer, seconds, rate, watch, progress)
    finally:
        await cancel_and_wait(sampler)
        retention = writer.after_roll
        with contextlib.suppress(WalogError):
            await writer.close()
    elapsed = time.monotonic() - started
    await watch.sample()
    return Soak(
        elapsed,
        entries,
        watch.memory,
        warmup,
        min(60.0, seconds / 4),
        disks=watch.disks,
        problems=watch.problems,
        rate=rate,
        acknowledged=watch.acknowledged,
        ledgers_deleted=retention.deleted if isinstance(retention, RetentionRunner) else 0,
    )


async def _append(
    writer: AsyncLogWriter,
    seconds: float,
    rate: int | None,
    watch: _Watch,
    progress: Progress,
) -> int:
    """Append until ``seconds`` passed or the watch found a problem; the entries
    acknowledged. A failure of the writer is a problem of the run."""
    data = payload(ENTRY_BYTES)
    inflight: collections.deque[asyncio.Future[Position]] = collections.deque()
    sent = done = reported = 0
    try:
        while not watch.broken.is_set():
            elapsed = time.monotonic() - watch.started
            if elapsed >= seconds:
                break
            room = WINDOW - len(inflight)
            if rate is not None:
                room = min(room, int(elapsed * rate) + 1 - sent)
            for _ in range(room):
                inflight.append(writer.append_nowait(data))
            sent += max(room, 0)
            if inflight and (rate is None or len(inflight) >= WINDOW):
                await inflight.popleft()  # acknowledged in order: the oldest first
                done += 1
            finished = _pop_done(inflight)
            done += finished
            if done - reported >= 256:
                progress(done - reported)
                reported = watch.entries = done
            if rate is not None and room <= 0 and not finished:
                await asyncio.sleep(PACE_S)  # ahead of the rate
        while inflight:
            await inflight.popleft()
            done += 1
        progress(done - reported)
        watch.entries = done
    except WalogError as exc:
        watch.problem(f"the log writer failed: {type(exc).__name__}: {exc}")
    finally:
        for future in inflight:
            future.cancel()
    return done


def _pop_done(inflight: collections.deque[asyncio.Future[Position]]) -> int:
    """Drop the acknowledged entries at the head (raising a failed one's error)."""
    count = 0
    while inflight and inflight[0].done():
        inflight.popleft().result()
        count += 1
    return count


__all__ = [
    "RATE",
    "RETENTION",
    "ROLL",
    "Soak",
    "WatchedBookie",
    "rss_mib",
    "soak",
    "watched_bookies",
]

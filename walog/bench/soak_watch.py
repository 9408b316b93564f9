"""What the soak (walog.bench.soak) watches on each bookie besides its memory: its disk use,
whether it is read-only, whether it still runs, and whether its storage failed.

Every sample records, for each bookie, the bytes its files take in its data directory (the
entry logs and the index; the journal's directory apart when it lies inside) and in its
journal directory, counted as allocated blocks (the journal reserves its files' space
ahead of its writes, and retired journal files are kept for reuse: both take disk), the
free space of the file system, and whether the bookie is read-only (``walog_bookie_read_only``
on its metrics port). A process that exited, and a ``journal failed`` or ``checkpoint failed``
line in its log, are failures of the run.

Disk use is **bounded** when, for every bookie, the peak of its data and journal bytes over
the run's last :data:`BOUND_WINDOW_S` is at most :data:`BOUND_FACTOR` times their peak over
as long right after the warm-up (in a run too short for that, the half after the warm-up is
compared with the half before it): retention, the GC and compaction keep up with the
writes. Use that keeps growing fails it by the end of a long enough run; use that only
breathes with the entry logs (a log's space comes back once every ledger in it was
deleted) stays within it.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

BOUND_FACTOR = 1.5
"""How far the peak of the last window may rise above the peak right after the warm-up."""
BOUND_WINDOW_S = 300.0
"""The windows compared to decide that disk use is bounded (five minutes)."""
_MIB = 1024 * 1024
_GIB = 1024 * _MIB


@dataclasses.dataclass(frozen=True)
class WatchedBookie:
    """Where the soak finds one bookie's process, files, metrics and log.

    Attributes:
        pid: the bookie's process.
        data_dir: its ``--data-dir``.
        journal_dir: its journal directory (``data_dir/journal`` by default).
        metrics_url: ``http://HOST:PORT`` of its metrics port, or None.
        log_path: the file its output goes to, or None.
        running: whether the process still runs.
    """

    pid: int
    data_dir: Path
    journal_dir: Path
    metrics_url: str | None
    log_path: Path | None
    running: Callable[[], bool]


@dataclasses.dataclass(frozen=True)
class DiskSample:
    """One bookie's disk at one moment.

    Attributes:
        data_bytes: allocated bytes under its data directory, the journal's apart.
        journal_bytes: allocated bytes under its journal directory.
        free_bytes: space left to non-root users on the data directory's file system.
        read_only: whether it refused adds then (None: its metrics did not say).
    """

    data_bytes: int
    journal_bytes: int
    free_bytes: int
    read_only: bool | None

    @property
    def used_bytes(self) -> int:
        """Data and journal bytes together."""
        return self.data_bytes + self.journal_bytes


def allocated_bytes(directory: Path, skip: Path | None = None) -> int:
    """Bytes the files under ``directory`` take on disk (blocks, as ``du`` counts them),
    without those under ``skip``; files deleted during the walk are left out."""
    total = 0
    for root, dirs, files in os.walk(directory):
        if skip is not None:
            dirs[:] = [d for d in dirs if Path(root, d) != skip]
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def is_read_only(metrics_url: str) -> bool | None:
    """``walog_bookie_read_only`` from the bookie's metrics; None if it cannot be read."""
    try:
        with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("walog_bookie_read_only{"):
            return float(line.rsplit(" ", 1)[1]) != 0
    return None


def measure_disk(bookie: WatchedBookie) -> DiskSample:
    """Sample one bookie's disk (blocking: walks its directories, reads its metrics)."""
    journal = bookie.journal_dir
    inside = journal if journal.is_relative_to(bookie.data_dir) else None
    st = os.statvfs(bookie.data_dir)
    return DiskSample(
        data_bytes=allocated_bytes(bookie.data_dir, skip=inside),
        journal_bytes=allocated_bytes(journal) if journal.exists() else 0,
        free_bytes=st.f_bavail * st.f_frsize,
        read_only=is_read_only(bookie.metrics_url) if bookie.metrics_url else None,
    )


class FailureWatch:
    """Reads a bookie's log as it grows, for lines saying its storage failed."""

    MARKS = ('"journal failed"', '"checkpoint failed"')
    """Log events of a failed journal (read-only for good) and of a failed checkpoint."""

    def __init__(self, log_path: Path | None) -> None:
        self._path = log_path
        self._offset = 0
        if log_path is not None and log_path.exists():
            self._offset = log_path.stat().st_size  # earlier runs' lines are not ours

    def new_failures(self) -> list[str]:
        """Failure lines written since the last call (blocking)."""
        if self._path is None or not self._path.exists():
            return []
        with self._path.open("rb") as log:
            log.seek(self._offset)
            text = log.read()
        end = text.rfind(b"\n") + 1  # a line being written is read next time
        self._offset += end
        lines = text[:end].decode("utf-8", "replace").splitlines()
        return [line for line in lines if any(mark in line for mark in self.MARKS)]


Samples = Sequence[tuple[float, Mapping[str, DiskSample]]]
"""``(seconds since start, {bookie: DiskSample})`` in time order."""


@dataclasses.dataclass(frozen=True)
class Minute:
    """The disks over one minute of the run.

    Attributes:
        minute: its number, from 1.
        used_mib: each bookie's peak data and journal use.
        journal_mib: each bookie's peak journal use.
        free_gib: the lowest free space of a bookie's file system.
        read_only: the bookies seen read-only.
        entries_per_s: entries acknowledged per second since the previous minute's last
            sample (None: not counted).
    """

    minute: int
    used_mib: dict[str, float]
    journal_mib: dict[str, float]
    free_gib: float
    read_only: list[str]
    entries_per_s: float | None = None

    @property
    def max_mib(self) -> float:
        """The highest use of any bookie."""
        return max(self.used_mib.values(), default=0.0)


def by_minute(samples: Samples, acknowledged: Sequence[tuple[float, int]] = ()) -> list[Minute]:
    """One :class:`Minute` per minute of the run; ``acknowledged``: ``(seconds since start,
    entries acknowledged by then)``, for the rate of each minute."""
    minutes: dict[int, list[Mapping[str, DiskSample]]] = {}
    for at, disks in samples:
        minutes.setdefault(int(at // 60) + 1, []).append(disks)
    last: dict[int, tuple[float, int]] = {0: (0.0, 0)}  # each minute's last count
    for at, count in acknowledged:
        last[int(at // 60) + 1] = (at, count)
    rows: list[Minute] = []
    for minute, chosen in sorted(minutes.items()):
        rate = None
        if minute in last and minute - 1 in last and last[minute][0] > last[minute - 1][0]:
            (was, before), (now, after) = last[minute - 1], last[minute]
            rate = round((after - before) / (now - was))
        used: dict[str, int] = {}
        journal: dict[str, int] = {}
        for disks in chosen:
            for name, sample in disks.items():
                used[name] = max(used.get(name, 0), sample.used_bytes)
                journal[name] = max(journal.get(name, 0), sample.journal_bytes)
        rows.append(
            Minute(
                minute=minute,
                used_mib=_in_mib(used),
                journal_mib=_in_mib(journal),
                free_gib=round(min(s.free_bytes for d in chosen for s in d.values()) / _GIB, 1),
                read_only=sorted({n for d in chosen for n, s in d.items() if s.read_only}),
                entries_per_s=rate,
            )
        )
    return rows


def _in_mib(sizes: Mapping[str, int]) -> dict[str, float]:
    return {name: round(size / _MIB, 1) for name, size in sorted(sizes.items())}


def peak_mib(samples: Samples) -> dict[str, float]:
    """Each bookie's highest data and journal use over the run, in MiB."""
    peaks: dict[str, int] = {}
    for _, disks in samples:
        for name, sample in disks.items():
            peaks[name] = max(peaks.get(name, 0), sample.used_bytes)
    return _in_mib(peaks)


def bound(samples: Samples, warmup: float) -> dict[str, tuple[float, float]]:
    """Each bookie's ``(peak right after the warm-up, peak at the end)`` in MiB, over the
    windows described in the module's docstring."""
    if not samples:
        return {}
    end = samples[-1][0]
    window = min(BOUND_WINDOW_S, max(end - warmup, 0.0) / 2)
    early = [d for at, d in samples if warmup <= at <= warmup + window]
    late = [d for at, d in samples if at >= end - window]
    out: dict[str, tuple[float, float]] = {}
    for name in sorted({n for _, d in samples for n in d}):
        first = max((d[name].used_bytes for d in early if name in d), default=0)
        last = max((d[name].used_bytes for d in late if name in d), default=0)
        out[name] = (round(first / _MIB, 1), round(last / _MIB, 1))
    return out


def unbounded(peaks: Mapping[str, tuple[float, float]]) -> list[str]:
    """The bookies whose disk use kept growing (see :func:`bound`), as sentences."""
    return [
        f"{name}'s disk use kept growing: peak {last:,.1f} MiB in the last window against "
        f"{first:,.1f} MiB after the warm-up (more than {BOUND_FACTOR}x)"
        for name, (first, last) in peaks.items()
        if last > BOUND_FACTOR * first
    ]


def table(rows: Sequence[Minute]) -> list[str]:
    """The rows of :func:`by_minute` as a Markdown table."""
    if not rows:
        return []
    names = sorted({name for row in rows for name in row.used_mib})
    head = ["minute", "entries/s", *(f"{name}, MiB" for name in names), "max, MiB"]
    head += ["journal, MiB", "free, GiB", "read-only"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * (len(head) - 1) + "---|"]
    for row in rows:
        rate = "-" if row.entries_per_s is None else f"{row.entries_per_s:,.0f}"
        cells = [str(row.minute), rate, *(f"{row.used_mib.get(n, 0.0):,.1f}" for n in names)]
        cells += [f"{row.max_mib:,.1f}", f"{max(row.journal_mib.values(), default=0.0):,.1f}"]
        cells += [f"{row.free_gib:,.1f}", ", ".join(row.read_only) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def print_disks(results: dict[str, Any], out: IO[str]) -> None:
    """The soak's disk use minute by minute (walog.bench.soak_watch), its peak and whether
    it stayed bounded."""
    rows = [
        Minute(**{field.name: row[field.name] for field in dataclasses.fields(Minute)})
        for row in results["soak_disk_by_minute"]
    ]
    rate = results["soak_rate"]
    print(
        f"\nsoak: bookies' disk use (data + journal directories) by minute, "
        f"{'full speed' if rate == 'full' else f'{rate:,} entries/s asked'}, "
        f"{results['soak_entries_per_s']:,} entries/s done, "
        f"{results['soak_ledgers_deleted_by_retention']:,} ledgers deleted by retention",
        file=out,
    )
    for line in table(rows):
        print(line, file=out)
    peaks = ", ".join(f"{n} {mib:,.1f}" for n, mib in results["soak_disk_peak_mib"].items())
    print(f"peak, MiB: {peaks}", file=out)
    bounds = results["soak_disk_bound_mib"].items()
    print(
        f"peak after the warm-up -> in the last window, MiB (bounded: at most "
        f"{BOUND_FACTOR}x): "
        + ", ".join(f"{n} {b['after_warmup']:,.1f} -> {b['end']:,.1f}" for n, b in bounds),
        file=out,
    )


__all__ = [
    "BOUND_FACTOR",
    "BOUND_WINDOW_S",
    "DiskSample",
    "FailureWatch",
    "Minute",
    "Samples",
    "WatchedBookie",
    "allocated_bytes",
    "bound",
    "by_minute",
    "is_read_only",
    "measure_disk",
    "peak_mib",
    "print_disks",
    "table",
    "unbounded",
]

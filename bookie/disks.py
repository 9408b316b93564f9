"""Read-only mode by disk usage: the thresholds, the rule, and the monitor that applies it.

A bookie watches the file systems of its data directory and its journal directory. When
the usage of any of them passes the high-water mark (``--disk-usage-threshold``) the bookie
turns read-only: plain adds are answered READ_ONLY, writers replace it in their ensembles,
and it is announced under ``/bookies/readonly`` instead of ``/bookies/available``, so no
new ensemble picks it. Reads, fences, LAC calls and recovery writes are still served: the
entries it holds stay reachable, and a recovery must be able to write back to every bookie
of a write quorum. Once every disk is back below the low-water mark
(``--disk-usage-lwm-threshold``) the bookie turns writable again by itself. The gap between
the two marks keeps a disk near the limit from flapping between the modes.

A journal that failed a write or a sync (full disk, I/O error) makes the bookie read-only
for good: nothing it acknowledges after that could be made durable. Only a restart, which
replays what the journal holds, ends that mode. A checkpoint that failed to write the entry
logs or the index makes it read-only until a checkpoint succeeds again (the entries stay
in the journal and in memory meanwhile, and are served from there).

Space comes back by itself. While any disk is used beyond the warning mark
(``--disk-usage-warn-threshold``) the bookie is *under pressure* (:func:`under_pressure`):
it measures every :data:`PRESSURE_INTERVAL_S` instead of every ``interval_s`` (so adds stop
soon after a disk passes the read-only mark, and what is left above it stays a reserve for
the journal, checkpoints and compaction), and after each measurement it calls
``on_pressure``, which runs the ledger GC and a compaction at once instead of waiting for
their intervals.

A disk is measured in good time however fast the bookie is written to: besides the timed
measurements, the monitor measures again as soon as the bookie has journaled a quarter of
the room left below the read-only mark at the last measurement
(:func:`bytes_before_check`). Each journaled byte takes at most a byte of the journal's
disk at once and a byte of the data disk (counted as unwritten until a checkpoint writes
it): two bytes of one disk that holds both. So no disk passes the mark unseen by more than
what the bookie takes while one measurement runs, and the reserve above the mark holds
that: at full speed, a timed measurement alone would let a small disk's reserve be written
over between two measurements, and the journal or a checkpoint meet a full disk.

:func:`full_disks`, :func:`under_pressure` and :func:`bytes_before_check` are the pure rules;
:class:`DiskMonitor` measures (``statvfs`` in a thread) and calls back on every change of
mode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Awaitable, Callable, Collection, Sequence
from pathlib import Path

import structlog

from walog.errors import WalogError
from walog.settings import setting

_log = structlog.get_logger("bookie.disks")


@dataclasses.dataclass(frozen=True)
class DiskThresholds:
    """Usage shares (0-1, used bytes over size) that switch a bookie's mode (each field's
    help text says how; the defaults are BookKeeper's)."""

    disk_usage_threshold: float = setting(
        0.95, help="above this used share of its data or journal disk the bookie turns read-only"
    )
    disk_usage_warn_threshold: float = setting(
        0.90, help="above this used share of a disk a warning is logged (once per crossing)"
    )
    disk_usage_lwm_threshold: float = setting(
        0.90,
        help="a read-only bookie takes adds again once every disk is used below this share "
        "(the low-water mark)",
    )

    def __post_init__(self) -> None:
        high = self.disk_usage_threshold
        if not 0 < high <= 1:
            raise ValueError(f"disk_usage_threshold must be in (0, 1], got {high}")
        for name in ("disk_usage_lwm_threshold", "disk_usage_warn_threshold"):
            if not 0 < getattr(self, name) <= high:
                raise ValueError(
                    f"{name} must be in (0, disk_usage_threshold], got {getattr(self, name)} "
                    f"(disk_usage_threshold {high})"
                )


@dataclasses.dataclass(frozen=True)
class DiskUsage:
    """One file system as seen from a bookie directory."""

    directory: Path
    used_bytes: int
    total_bytes: int

    @property
    def share(self) -> float:
        """Used share of the file system (space reserved for root counts as used, as
        ``df`` does: the bookie may not run as root)."""
        return self.used_bytes / self.total_bytes if self.total_bytes > 0 else 0.0


def measure(directory: Path) -> DiskUsage:
    """The usage of the file system holding ``directory`` (blocking: ``statvfs``)."""
    st = os.statvfs(directory)
    total = st.f_blocks * st.f_frsize
    return DiskUsage(directory, total - st.f_bavail * st.f_frsize, total)


def full_disks(
    usages: Collection[DiskUsage], thresholds: DiskThresholds, full: Collection[Path]
) -> set[Path]:
    """The directories whose disk is full now, given those that were full before.

    A disk turns full above ``thresholds.disk_usage_threshold`` and stays full until it
    falls below ``thresholds.disk_usage_lwm_threshold`` (hysteresis).
    """
    high, low = thresholds.disk_usage_threshold, thresholds.disk_usage_lwm_threshold
    out: set[Path] = set()
    for usage in usages:
        was_full = usage.directory in full
        if usage.share > high or (was_full and usage.share >= low):
            out.add(usage.directory)
    return out


PRESSURE_INTERVAL_S = 1.0
"""Longest time between measurements while a disk is under pressure."""


def under_pressure(usages: Collection[DiskUsage], thresholds: DiskThresholds) -> bool:
    """Whether any disk is used beyond the warning mark (space should be reclaimed now)."""
    return any(u.share > thresholds.disk_usage_warn_threshold for u in usages)


MIN_BYTES_BETWEEN_CHECKS = 1024 * 1024
"""Bytes journaled between two measurements triggered by writes, at least (a disk right at
its mark is not measured after every group commit: the reserve holds this much)."""


def bytes_before_check(usages: Collection[DiskUsage], thresholds: DiskThresholds) -> int:
    """Bytes the bookie may journal before it measures its disks again: a quarter of the
    smallest room left below the read-only mark (see the module's description), and at
    least :data:`MIN_BYTES_BETWEEN_CHECKS`."""
    room = min(
        (int(u.total_bytes * thresholds.disk_usage_threshold) - u.used_bytes for u in usages),
        default=0,
    )
    return max(room // 4, MIN_BYTES_BETWEEN_CHECKS)


def free_bytes(directory: Path) -> int:
    """Bytes the bookie may still write on the file system of ``directory`` (blocking)."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def reserve_bytes(directory: Path, thresholds: DiskThresholds) -> int:
    """The bytes of the disk of ``directory`` above the read-only mark (blocking): plain
    adds never fill them, compaction and the journal may."""
    st = os.statvfs(directory)
    return int(st.f_blocks * st.f_frsize * (1 - thresholds.disk_usage_threshold))


def entry_log_bytes_for(configured: int, reserve: int) -> int:
    """The entry-log size to use on a data disk with ``reserve`` bytes above the read-only
    mark: at most half the reserve (and no less than 1 MiB), so that compacting any log,
    which needs its live bytes free, fits in the reserve; ``configured`` when it fits
    already or when there is no reserve (a mark of 1: the operator takes the risk)."""
    if reserve <= 0:
        return configured
    return min(configured, max(reserve // 2, 1024 * 1024))


JOURNAL_FILES_NEEDED = 2
"""Journal files a journal's disk must hold at once: the one being filled and the one
before it, which stays until a checkpoint retires it."""


class JournalDiskTooSmallError(WalogError):
    """The journal directory's file system cannot hold the journal's files."""


def check_journal_disk(directory: Path, file_bytes: int) -> None:
    """Refuse a journal directory on a file system smaller than the journal needs
    (:data:`JOURNAL_FILES_NEEDED` files of ``file_bytes``): such a journal would fail
    with a full disk soon after start, and the bookie stay read-only until restarted.

    Raises:
        JournalDiskTooSmallError: naming the directory, the disk's size and what is needed.
    """
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    st = os.statvfs(existing)
    size = st.f_blocks * st.f_frsize
    needed = JOURNAL_FILES_NEEDED * file_bytes
    if size < needed:
        raise JournalDiskTooSmallError(
            f"journal directory {directory} is on a disk of {_mib(size)}, too small for the "
            f"journal: it needs at least {_mib(needed)} ({JOURNAL_FILES_NEEDED} journal files "
            f"of --journal-file-bytes {_mib(file_bytes)}: the one being filled and the one "
            "before it, kept until a checkpoint retires it); give the journal a larger disk "
            "(--journal-dir) or smaller files (--journal-file-bytes)"
        )


def _mib(size: int) -> str:
    return f"{size} bytes ({size / (1024 * 1024):.1f} MiB)"


ModeListener = Callable[[str | None], Awaitable[None]]
"""Called with the reason of read-only mode, or None when the bookie turns writable."""


class DiskMonitor:
    """Measures the bookie's disks every ``interval_s`` and switches its mode.

    Args:
        directories: the data and journal directories (one measurement per file system).
        thresholds: the usage marks.
        interval_s: seconds between measurements.
        storage_failure: returns why the storage cannot take adds (a failed journal or
            checkpoint), or None.
        on_change: awaited with the new mode's reason (None: writable) on every change;
            an exception is logged and the call is repeated at the next measurement.
        on_pressure: called after every measurement that finds a disk under pressure.
        unwritten_bytes: bytes the first directory's disk is still to receive (entries
            taken and not yet checkpointed); counted as used, so that the bookie turns
            read-only before the checkpoint that writes them, not after, and the space
            above the read-only mark stays a reserve.

    Call :meth:`journaled` with the bytes of every journal write: the monitor then also
    measures once they reach :func:`bytes_before_check` of the last measurement.
    """

    def __init__(
        self,
        directories: Sequence[Path],
        thresholds: DiskThresholds,
        interval_s: float,
        storage_failure: Callable[[], str | None],
        on_change: ModeListener,
        on_pressure: Callable[[], None] = lambda: None,
        unwritten_bytes: Callable[[], int] = lambda: 0,
    ) -> None:
        by_device: dict[int, Path] = {}
        for directory in directories:
            by_device.setdefault(os.stat(directory).st_dev, directory)
        self.directories = tuple(by_device.values())
        self.thresholds = thresholds
        self.interval_s = interval_s
        self._storage_failure = storage_failure
        self._on_change = on_change
        self._on_pressure = on_pressure
        self._unwritten_bytes = unwritten_bytes
        self._wake = asyncio.Event()
        self._journaled = 0  # bytes journaled since the last measurement started
        self._check_after = MIN_BYTES_BETWEEN_CHECKS
        self._full: set[Path] = set()
        self._warned: set[Path] = set()
        self._applied: str | None = None  # the mode on_change last applied: writable
        self.usages: tuple[DiskUsage, ...] = ()
        """The last measurement, one per file system."""
        self.reason: str | None = None
        """Why the bookie is read-only, None while it is writable."""
        self.read_only_entered = 0
        """How many times the bookie turned read-only since start."""
        self.under_pressure = False
        """Whether a disk was used beyond the warning mark at the last measurement."""

    @property
    def highest_share(self) -> float:
        """The highest used share of the bookie's disks at the last measurement."""
        return max((u.share for u in self.usages), default=0.0)

    def wake(self) -> None:
        """Measure now (for example after the storage reported a failure)."""
        self._wake.set()

    def journaled(self, size: int) -> None:
        """The journal wrote ``size`` bytes: measure now if enough was written since the
        last measurement (:func:`bytes_before_check`)."""
        self._journaled += size
        if self._journaled >= self._check_after:
            self._wake.set()

    async def check(self) -> str | None:
        """Measure once, apply a change of mode, and return the current reason."""
        # Bytes journaled from here on may be missing from the measurement: they count
        # towards the next one.
        self._journaled = 0
        measured = await asyncio.gather(*(asyncio.to_thread(measure, d) for d in self.directories))
        unwritten = self._unwritten_bytes()
        first = measured[0]
        measured[0] = DiskUsage(
            first.directory, min(first.total_bytes, first.used_bytes + unwritten), first.total_bytes
        )
        self.usages = tuple(measured)
        self._check_after = bytes_before_check(self.usages, self.thresholds)
        self._log_warnings()
        self.under_pressure = under_pressure(self.usages, self.thresholds)
        if self.under_pressure:
            self._on_pressure()
        self._full = full_disks(self.usages, self.thresholds, self._full)
        reason = self._storage_failure()
        if reason is None and self._full:
            reason = "disk full: " + ", ".join(
                f"{u.directory} {u.share:.1%} used "
                f"(threshold {self.thresholds.disk_usage_threshold:.0%})"
                for u in self.usages
                if u.directory in self._full
            )
        if (reason is None) != (self.reason is None):
            if reason is not None:
                self.read_only_entered += 1
                _log.error("bookie turned read-only", reason=reason)
            else:
                _log.warning(
                    "bookie writable again",
                    usage=", ".join(f"{u.directory} {u.share:.1%}" for u in self.usages),
                    low_water_mark=self.thresholds.disk_usage_lwm_threshold,
                )
        self.reason = reason
        if (self._applied is None) != (reason is None):
            try:
                await self._on_change(reason)
            except Exception as exc:
                _log.warning("mode change not applied yet; retrying", error=str(exc))
            else:
                self._applied = reason
        return reason

    def _log_warnings(self) -> None:
        warn = self.thresholds.disk_usage_warn_threshold
        for usage in self.usages:
            if usage.share > warn and usage.directory not in self._warned:
                self._warned.add(usage.directory)
                _log.warning(
                    "disk usage above the warning threshold",
                    directory=str(usage.directory),
                    share=round(usage.share, 4),
                    warn=warn,
                    threshold=self.thresholds.disk_usage_threshold,
                )
            elif usage.share <= warn:
                self._warned.discard(usage.directory)

    async def run(self, stop: asyncio.Event) -> None:
        """Measure until ``stop`` is set; the first measurement happens at once."""
        while not stop.is_set():
            self._wake.clear()  # a wake during the measurement asks for the next one
            try:
                await self.check()
            except OSError as exc:
                _log.warning("disk usage not measured", error=str(exc))
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())}
            try:
                interval = self.interval_s
                if self.under_pressure:
                    interval = min(interval, PRESSURE_INTERVAL_S)
                await asyncio.wait(waiters, timeout=interval, return_when="FIRST_COMPLETED")
            finally:
                for waiter in waiters:
                    waiter.cancel()


__all__ = [
    "JOURNAL_FILES_NEEDED",
    "MIN_BYTES_BETWEEN_CHECKS",
    "PRESSURE_INTERVAL_S",
    "DiskMonitor",
    "DiskThresholds",
    "DiskUsage",
    "JournalDiskTooSmallError",
    "ModeListener",
    "bytes_before_check",
    "check_journal_disk",
    "entry_log_bytes_for",
    "free_bytes",
    "full_disks",
    "measure",
    "reserve_bytes",
    "under_pressure",
]

"""Entry-log compaction: giving back the space of deleted ledgers that share logs with live
ones.

Entry logs interleave many ledgers. Deleting a ledger (GC) drops its index rows at once and
deletes every log left without live data; a log still partly live keeps its bytes until
it is compacted: its live entries are copied to the log being filled, their index rows
repointed, and the old log deleted. Like BookKeeper, two passes run on their own clocks:

- a *minor* compaction every ``minor_compaction_interval_s`` takes the logs whose live
  share is below ``minor_compaction_threshold`` (cheap: little to copy for much space);
- a *major* compaction every ``major_compaction_interval_s`` takes those below
  ``major_compaction_threshold``.

Copying runs in steps of about 1 MiB in the storage thread, between checkpoints, and at
most ``compaction_rate_bytes`` per second, so a writer's adds and the checkpoints keep their pace.
:func:`logs_to_compact` is the pure rule; :class:`Compactor` runs it against a core.

Compaction on a full disk. Copying a log's live entries needs that many bytes free before
the old log can go. Read-only mode (bookie/disks.py) stops plain adds at
``--disk-usage-threshold``, which leaves the rest of the disk as a reserve that only
checkpoints of entries already acknowledged, the journal and compaction write to. When the
compactor is given a measure of that room (:attr:`Compactor.room`, the data disk's free
bytes), it takes a log only if its live bytes plus :data:`ROOM_MARGIN_BYTES` fit
(:func:`fits`), emptiest first: each log compacted gives back more than it took, so the
room grows as the pass goes on, and a log that does not fit is left with one log line
rather than failing the disk. A disk full to the last byte still frees every log left
without live data at the deletion itself, which needs no room.

A log is deleted only once every live entry in it was read and copied, or was read and
found damaged (its header or digest wrong: that copy is lost either way, and its reads
answer IO_ERROR, so auto-recovery copies the entry back). A read the disk failed (EIO)
proves nothing about the record: the log is left as it is, the pass goes on with the
next one, and a later pass takes it again (``walog_bookie_compaction_read_errors_total``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from bookie.storage.entry_storage import EntryStorage, UnreadableEntryLogError
from bookie.storage.journal_files import StorageIOError
from walog.settings import setting

_log = structlog.get_logger("bookie.storage.compaction")

STEP_BYTES = 1024 * 1024
"""Payload bytes copied per step (one storage-thread job between checkpoints)."""

ROOM_MARGIN_BYTES = STEP_BYTES
"""Free bytes a compaction leaves untouched besides a log's live bytes: the index rows it
repoints and the entry log's header need some, and so do the journal and checkpoints."""

StorageStep = Callable[[Callable[["EntryStorage"], Any]], Awaitable[Any]]
"""Runs a function on the storage in its thread, between checkpoints; returns its result."""


@dataclasses.dataclass(frozen=True)
class CompactionPolicy:
    """When entry logs are compacted, and how fast (each field's help text says which)."""

    minor_compaction_threshold: float = setting(
        0.2, help="minor compaction copies the entry logs whose live share is below this"
    )
    minor_compaction_interval_s: float = setting(
        3600.0, help="time between minor compactions (0: off)"
    )
    major_compaction_threshold: float = setting(
        0.8, help="major compaction copies the entry logs whose live share is below this"
    )
    major_compaction_interval_s: float = setting(
        86400.0, help="time between major compactions (0: off)"
    )
    compaction_rate_bytes: int = setting(
        32 * 1024 * 1024, help="most payload bytes compaction copies per second"
    )

    def __post_init__(self) -> None:
        minor, major = self.minor_compaction_threshold, self.major_compaction_threshold
        if not 0 <= minor <= major < 1:
            raise ValueError(
                "0 <= minor_compaction_threshold <= major_compaction_threshold < 1 must hold, "
                f"got {minor} and {major}"
            )
        for name in ("minor_compaction_interval_s", "major_compaction_interval_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: off), got {getattr(self, name)}")
        if self.compaction_rate_bytes <= 0:
            raise ValueError(f"compaction_rate_bytes must be > 0, got {self.compaction_rate_bytes}")


def _now() -> float:
    """The event loop's clock (a simulated loop's virtual time in the simulator)."""
    return asyncio.get_running_loop().time()


def logs_to_compact(shares: Mapping[int, float], threshold: float) -> list[int]:
    """The logs whose live share is below ``threshold``, emptiest first (most space back
    for the least copying)."""
    return sorted((log for log, share in shares.items() if share < threshold),
                  key=lambda log: (shares[log], log))  # fmt: skip


def fits(live_bytes: int, free_bytes: int) -> bool:
    """Whether a log with ``live_bytes`` to copy can be compacted with ``free_bytes`` free."""
    return live_bytes + ROOM_MARGIN_BYTES <= free_bytes


def _compact_step(
    storage: EntryStorage, *, log_id: int, after: tuple[int, int] | None
) -> tuple[tuple[int, int] | None, int]:
    return storage.compact_step(log_id, after, STEP_BYTES)


class Compactor:
    """Runs the minor and major compactions of one bookie.

    Args:
        policy: thresholds, intervals and rate.
        in_storage: runs a function on the storage in its thread, between checkpoints.
    """

    def __init__(self, policy: CompactionPolicy, in_storage: StorageStep) -> None:
        self.policy = policy
        self._in_storage = in_storage
        self.room: Callable[[], int] | None = None
        """Measures the free bytes of the disk compaction writes to (blocking; run in a
        thread); None: not measured, every chosen log is taken."""
        self._lock = asyncio.Lock()
        self.compacted_logs = 0
        """Logs compacted since start."""
        self.bytes_moved = 0
        """Payload bytes copied since start."""

    async def compact(self, threshold: float, *, seal_filling: bool = False) -> int:
        """Compact every log whose live share is below ``threshold`` now; returns how many
        were compacted. A log the disk failed to read, or one whose live bytes do not fit
        in the room left (:attr:`room`), is left for a later pass. Passes never overlap: a
        call made while one runs waits for it.

        Args:
            threshold: the live share below which a log is compacted.
            seal_filling: first seal the log being filled if it is below ``threshold``
                too (:meth:`LogSpace.seal_filling_log`), so that it is compacted as
                well (a disk under pressure).

        Raises:
            StorageIOError: the index or the log being filled failed.
        """
        async with self._lock:
            if seal_filling:
                await self._in_storage(lambda s: s.space.seal_filling_log(threshold))
            return await self._compact(threshold)

    async def _compact(self, threshold: float) -> int:
        shares: dict[int, float] = await self._in_storage(lambda s: s.space.live_shares())
        chosen = logs_to_compact(shares, threshold)
        started = _now()
        moved_before = self.bytes_moved
        compacted = 0
        for log_id in chosen:
            if not await self._fits(log_id):
                continue
            after: tuple[int, int] | None = None
            while True:
                try:
                    step: tuple[tuple[int, int] | None, int] = await self._in_storage(
                        functools.partial(_compact_step, log_id=log_id, after=after)
                    )
                except UnreadableEntryLogError as exc:
                    _log.warning(
                        "entry log left for a later compaction", log=log_id, error=str(exc)
                    )
                    break
                after, moved = step
                self.bytes_moved += moved
                # Rate limit: never ahead of compaction_rate_bytes per second since the pass began.
                ahead = (self.bytes_moved - moved_before) / self.policy.compaction_rate_bytes - (
                    _now() - started
                )
                if ahead > 0:
                    await asyncio.sleep(ahead)
                if after is None:
                    compacted += 1
                    break
        self.compacted_logs += compacted
        if chosen:
            _log.info(
                "entry logs compacted",
                logs=compacted,
                left=len(chosen) - compacted,
                threshold=threshold,
                moved_bytes=self.bytes_moved - moved_before,
                seconds=round(_now() - started, 3),
            )
        return compacted

    async def _fits(self, log_id: int) -> bool:
        room = self.room
        if room is None:
            return True
        live: int = await self._in_storage(lambda s: s.space.live_bytes(log_id))
        free = await asyncio.to_thread(room)
        if fits(live, free):
            return True
        _log.warning(
            "entry log left for a later compaction: not enough room",
            log=log_id,
            live_bytes=live,
            free_bytes=free,
            margin_bytes=ROOM_MARGIN_BYTES,
        )
        return False

    async def run(self) -> None:
        """Run the minor and major passes on their intervals until cancelled."""
        policy = self.policy
        passes = [
            (interval, threshold, name)
            for interval, threshold, name in (
                (policy.minor_compaction_interval_s, policy.minor_compaction_threshold, "minor"),
                (policy.major_compaction_interval_s, policy.major_compaction_threshold, "major"),
            )
            if interval > 0
        ]
        if not passes:
            return
        now = _now()
        due = {name: now + interval for interval, _, name in passes}
        while True:
            name = min(due, key=lambda n: due[n])
            await asyncio.sleep(max(0.0, due[name] - _now()))
            interval, threshold, _ = next(p for p in passes if p[2] == name)
            try:
                await self.compact(threshold)
            except StorageIOError as exc:
                _log.error("compaction failed", kind=name, error=str(exc))
            due[name] = _now() + interval


__all__ = [
    "ROOM_MARGIN_BYTES",
    "STEP_BYTES",
    "CompactionPolicy",
    "Compactor",
    "fits",
    "logs_to_compact",
]

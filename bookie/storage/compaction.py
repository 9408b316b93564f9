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
        self.compacted_logs = 0
        """Logs compacted since start."""
        self.bytes_moved = 0
        """Payload bytes copied since start."""

    async def compact(self, threshold: float) -> int:
        """Compact every log whose live share is below ``threshold`` now; returns how many
        were compacted. A log the disk failed to read is left for a later pass.

        Raises:
            StorageIOError: the index or the log being filled failed.
        """
        shares: dict[int, float] = await self._in_storage(lambda s: s.live_shares())
        chosen = logs_to_compact(shares, threshold)
        started = _now()
        moved_before = self.bytes_moved
        compacted = 0
        for log_id in chosen:
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


__all__ = ["STEP_BYTES", "CompactionPolicy", "Compactor", "logs_to_compact"]

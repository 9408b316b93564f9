"""The pure rules of the state-machine recipe: roles, snapshot policy, which snapshots stay
and how far the log may be truncated, and exactly-once application by position.

No clock, network or store in here: the driver (walog.recipes.machine) passes counts,
"now" and the log's metadata, and carries the decisions out.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Literal

from walog.log.log_metadata import SnapshotInfo
from walog.log.position import Position


class Role(enum.Enum):
    """What a node of a replicated state machine does now.

    ``STANDBY`` tails the log and applies it; ``CATCHING_UP`` has taken the log over
    (fenced the previous leader) and applies what is left before serving; ``LEADER``
    serves commands; ``STOPPED`` after :meth:`close`.
    """

    STANDBY = "standby"
    CATCHING_UP = "catching-up"
    LEADER = "leader"
    STOPPED = "stopped"


SnapshotTaker = Literal["any", "leader", "standby"]


@dataclasses.dataclass(frozen=True)
class SnapshotPolicy:
    """When a node snapshots its state, and how many snapshots the log keeps.

    A snapshot is due once any limit is reached since the last snapshot (or restore);
    None disables a limit, so the default never snapshots. After a snapshot is stored
    and listed, the oldest ones beyond ``keep`` are deleted and the log is truncated up to
    the oldest one kept, so every kept snapshot can still be replayed forward (the newest
    can be corrupt and the one before it used instead).

    Attributes:
        every_records: records applied since the last snapshot.
        every_bytes: record bytes applied since the last snapshot.
        every_seconds: seconds since the last snapshot, once at least one record applied.
        keep: snapshots listed at most (>= 1).
        taken_by: which nodes take them: ``"any"``, ``"leader"`` or ``"standby"``.
        truncate: truncate the log up to the oldest kept snapshot after each one.
    """

    every_records: int | None = None
    every_bytes: int | None = None
    every_seconds: float | None = None
    keep: int = 2
    taken_by: SnapshotTaker = "any"
    truncate: bool = True

    def __post_init__(self) -> None:
        for name in ("every_records", "every_bytes", "every_seconds"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise ValueError(f"SnapshotPolicy.{name} must be > 0 or None, got {value!r}")
        if isinstance(self.keep, bool) or not isinstance(self.keep, int) or self.keep < 1:
            raise ValueError(f"SnapshotPolicy.keep must be an int >= 1, got {self.keep!r}")
        if self.taken_by not in ("any", "leader", "standby"):
            raise ValueError(
                "SnapshotPolicy.taken_by must be 'any', 'leader' or 'standby', "
                f"got {self.taken_by!r}"
            )

    @property
    def enabled(self) -> bool:
        """True when any limit is set."""
        return any(
            x is not None for x in (self.every_records, self.every_bytes, self.every_seconds)
        )

    def takes_on(self, role: Role) -> bool:
        """True when a node in ``role`` takes snapshots."""
        if role is Role.LEADER:
            return self.taken_by in ("any", "leader")
        if role is Role.STANDBY:
            return self.taken_by in ("any", "standby")
        return False

    def due(self, *, records: int, size_bytes: int, age: float) -> bool:
        """True when a snapshot is due after ``records`` records of ``size_bytes`` bytes
        applied over ``age`` seconds since the last one. Never with nothing new."""
        if records <= 0:
            return False
        return (
            (self.every_records is not None and records >= self.every_records)
            or (self.every_bytes is not None and size_bytes >= self.every_bytes)
            or (self.every_seconds is not None and age >= self.every_seconds)
        )


def next_after(position: Position) -> Position:
    """The first position after the record at ``position``: replay resumes there."""
    return Position(position.ledger_id, position.entry_id, position.slot + 1)


def is_new(applied_through: Position | None, position: Position) -> bool:
    """True when a record at ``position`` is not yet applied to a state that holds every
    record before ``applied_through`` (exactly-once: a record is applied only when its
    position is at or past the resume point, and the resume point only moves forward)."""
    return applied_through is None or position >= applied_through


def with_snapshot(
    snapshots: Sequence[SnapshotInfo], new: SnapshotInfo, keep: int
) -> tuple[tuple[SnapshotInfo, ...], tuple[SnapshotInfo, ...]] | None:
    """The snapshot list with ``new`` added, and the snapshots it drops (beyond ``keep``).

    None when ``new`` is not newer than every listed snapshot: another node already
    listed one at least as recent, and ``new`` should be deleted instead.
    """
    if snapshots and snapshots[-1].position >= new.position:
        return None
    merged = (*snapshots, new)
    cut = max(0, len(merged) - keep)
    return merged[cut:], merged[:cut]


def truncation_point(snapshots: Sequence[SnapshotInfo]) -> Position | None:
    """How far the log may be truncated: up to the oldest kept snapshot (None: nowhere).

    Every kept snapshot must stay replayable, so nothing at or after the oldest one's
    position may go.
    """
    return snapshots[0].position if snapshots else None


def restore_order(snapshots: Sequence[SnapshotInfo]) -> list[SnapshotInfo]:
    """The snapshots to try on start, newest first."""
    return sorted(snapshots, key=lambda s: s.position, reverse=True)


def caught_up(resume_at: Position | None, reader_at: Position | None, target: Position) -> bool:
    """True when a new leader may serve: it applied every record before ``target`` (the
    first position of its own ledger, after which only its own records can be)."""
    here = reader_at if reader_at is not None else resume_at
    return here is not None and here >= target


__all__ = [
    "Role",
    "SnapshotPolicy",
    "SnapshotTaker",
    "caught_up",
    "is_new",
    "next_after",
    "restore_order",
    "truncation_point",
    "with_snapshot",
]

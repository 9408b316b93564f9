"""Roll and retention policies and the pure decisions made from them.

No clock, network or store in here: callers pass "now" and the log's metadata, and get back
how many ledgers to act on. The I/O that carries the decisions out is in
``walog.log.truncation`` (truncation, retention, orphan collection) and
``walog.log.writer`` (rolling).

Only whole ledgers are ever deleted, and only from the head of the list (docs/protocol.md,
"Truncation"); the last ledger of the list (the one being written) never is, and neither is a
ledger whose end the log does not know yet (state OPEN in the log's metadata).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from walog.log.log_metadata import LedgerInfo
from walog.log.position import Position, ledger_end


def _check_positive(owner: str, name: str, value: float | int | None) -> None:
    if value is not None and (isinstance(value, bool) or not value > 0):
        raise ValueError(f"{owner}.{name} must be > 0 or None, got {value!r}")


@dataclasses.dataclass(frozen=True)
class RollPolicy:
    """When a log writer closes its ledger and continues in a new one.

    Any limit reached starts a roll; None disables that limit. The limits are not caps: while
    the roll creates the next ledger and adds it to the log (metadata store round trips),
    appends go on into the current ledger, so a ledger can end past them. ``roll()`` on the
    writer returns only once it has switched. An empty ledger is never rolled. Rolling lets
    retention delete old data without a change of writer.

    Attributes:
        max_entries: entries written to the current ledger.
        max_bytes: entry bytes written to the current ledger.
        max_age: seconds since the current ledger was created.
    """

    max_entries: int | None = None
    max_bytes: int | None = None
    max_age: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_entries", "max_bytes", "max_age"):
            _check_positive("RollPolicy", name, getattr(self, name))

    @property
    def enabled(self) -> bool:
        """True when any limit is set."""
        return any(x is not None for x in (self.max_entries, self.max_bytes, self.max_age))

    def should_roll(self, *, entries: int, size_bytes: int, age: float) -> bool:
        """True when a ledger with these counts should be rolled now."""
        if entries <= 0:
            return False
        return (
            (self.max_entries is not None and entries >= self.max_entries)
            or (self.max_bytes is not None and size_bytes >= self.max_bytes)
            or (self.max_age is not None and age >= self.max_age)
        )


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    """Which old ledgers :meth:`walog.Log.enforce_retention` deletes.

    A head ledger is deleted when it is older than ``max_age`` seconds (age from the time
    it was closed, or created when that is unknown) or when the closed ledgers together
    hold more than ``max_bytes``; None disables a limit, so the default deletes nothing.
    Deletion stops at the first ledger that must stay.

    Attributes:
        max_age: seconds a closed ledger is kept.
        max_bytes: bytes the closed ledgers of the log may hold.
        require_archived: only delete ledgers wholly before the log's archived-through mark
            (set by the archive job through ``walog.log.log_metadata.mark_archived``).
    """

    max_age: float | None = None
    max_bytes: int | None = None
    require_archived: bool = False

    def __post_init__(self) -> None:
        _check_positive("RetentionPolicy", "max_age", self.max_age)
        _check_positive("RetentionPolicy", "max_bytes", self.max_bytes)


def _removable(info: LedgerInfo, index: int, count: int) -> bool:
    """A head ledger may leave the list: not the last one, and its end is known."""
    return index < count - 1 and info.is_closed


def truncation_count(ledgers: Sequence[LedgerInfo], before: Position) -> int:
    """How many head ledgers have every record strictly before ``before``.

    Stops at the first ledger that does not qualify; never counts the last ledger or one
    whose end is not known (OPEN in the log's metadata).
    """
    count = 0
    for i, info in enumerate(ledgers):
        if not _removable(info, i, len(ledgers)):
            break
        if ledger_end(info.ledger_id, info.last_entry_id) > before:
            break
        count += 1
    return count


def retention_count(
    ledgers: Sequence[LedgerInfo],
    policy: RetentionPolicy,
    *,
    now: float,
    archived_through: Position | None,
    cursors: Mapping[str, Position] | Iterable[Position] = (),
) -> int:
    """How many head ledgers the policy deletes now.

    A ledger goes only if it is removable (not last, end known), wholly archived when the
    policy requires it, passed by every cursor, and either too old or needed to bring the
    closed ledgers' total size under ``max_bytes``. Unknown sizes count as 0, so callers
    measure ledgers of unknown size first when ``max_bytes`` is set.
    """
    marks = list(cursors.values()) if isinstance(cursors, Mapping) else list(cursors)
    total = sum(info.size_bytes or 0 for info in ledgers if info.is_closed)
    count = 0
    for i, info in enumerate(ledgers):
        if not _removable(info, i, len(ledgers)):
            break
        end = ledger_end(info.ledger_id, info.last_entry_id)
        if policy.require_archived and (archived_through is None or archived_through < end):
            break
        if any(mark < end for mark in marks):
            break
        closed_at = info.closed_at if info.closed_at is not None else info.ctime
        too_old = policy.max_age is not None and now - closed_at > policy.max_age
        too_big = policy.max_bytes is not None and total > policy.max_bytes
        if not (too_old or too_big):
            break
        total -= info.size_bytes or 0
        count += 1
    return count


__all__ = ["RetentionPolicy", "RollPolicy", "retention_count", "truncation_count"]

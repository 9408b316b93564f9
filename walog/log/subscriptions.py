"""Named subscriptions: a log's cursors as consumers see them (pure).

A subscription is a named cursor in the log's metadata record (``cursors``): the position
its consumer reads next, every record before it consumed. A reader opened for a
subscription (``open_reader(subscription=NAME)``) starts there, and its ``commit()`` moves
the cursor (walog.log.log_metadata ``commit_cursor``, a CAS). Retention keeps every ledger
a subscription has not passed, up to the policy's backlog limits
(walog.log.retention ``RetentionPolicy``).
"""

from __future__ import annotations

import dataclasses

from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.position import Position, ledger_end

MAX_SUBSCRIPTION_CHARS = 200


def validate_subscription_name(name: object) -> str:
    """Return ``name`` if it can name a subscription.

    Raises:
        TypeError: not a str.
        ValueError: empty, over 200 characters, or contains a control character.
    """
    if not isinstance(name, str):
        raise TypeError(f"subscription is a str, got {type(name).__name__}")
    if not name:
        raise ValueError("subscription name is empty")
    if len(name) > MAX_SUBSCRIPTION_CHARS:
        raise ValueError(
            f"subscription name is {len(name)} characters; at most {MAX_SUBSCRIPTION_CHARS}"
        )
    bad = [c for c in name if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0]
    if bad:
        raise ValueError(f"subscription name {name!r} contains control character {bad[0]!r}")
    return name


@dataclasses.dataclass(frozen=True)
class SubscriptionInfo:
    """A subscription of a log and how far behind it is.

    Attributes:
        name: the subscription.
        position: the position it reads next (every record before it consumed).
        entries_behind: entries of the closed ledgers at or after ``position`` (entries,
            not records: an entry packs one or more), plus those of the open ledger up to
            ``open_last_entry`` when given.
        backlog_bytes: bytes of the closed ledgers from the first it has not read to the
            end of the log, as retention's backlog limit counts them (unknown sizes count 0).
    """

    name: str
    position: Position
    entries_behind: int
    backlog_bytes: int


def _entries_after(info: LedgerInfo, last_entry: int, position: Position) -> int:
    if position.ledger_id > info.ledger_id:
        return 0
    first = position.entry_id if position.ledger_id == info.ledger_id else 0
    return max(0, last_entry + 1 - first)


def subscriptions_of(meta: LogMetadata, open_last_entry: int = -1) -> list[SubscriptionInfo]:
    """Every subscription of the log whose record is ``meta``, by name.

    ``open_last_entry``: the last entry confirmed in the log's open ledger (its LAC), when
    the caller read it; -1 counts none of it.
    """
    out = []
    for name, position in sorted(meta.cursors.items()):
        entries = 0
        backlog = 0
        for info in meta.ledgers:
            last = info.last_entry_id if info.is_closed else open_last_entry
            entries += _entries_after(info, last, position)
            if info.is_closed and position < ledger_end(info.ledger_id, info.last_entry_id):
                backlog += info.size_bytes or 0
        out.append(SubscriptionInfo(name, position, entries, backlog))
    return out


__all__ = [
    "SubscriptionInfo",
    "subscriptions_of",
    "validate_subscription_name",
]

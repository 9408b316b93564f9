"""How far a reader trails the log: the pure count behind ``LogReader.lag()``.

A warm standby tails the log its leader writes and must know when it has applied
everything the leader made durable, so that it can take over without a long catch-up.
The log's end is what the bookies confirm now: the last entry of each closed ledger, the
last add confirmed (LAC) of an open one. A reader is caught up when no confirmed entry
lies at or after the position of the next record it will return. The count is pure
(:func:`entries_behind`); :func:`measure_lag` reads what it needs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence

from walog.errors import NoSuchLedgerError
from walog.log.ledgers import LedgerClientLike
from walog.log.log_metadata import LedgerInfo, read_log
from walog.log.position import Position


@dataclasses.dataclass(frozen=True, slots=True)
class ReaderLag:
    """A reader's distance from the log's end, measured when asked.

    Attributes:
        position: the next record the reader will return (None: it has not started, e.g.
            the log is empty).
        entries_behind: confirmed entries at or after ``position``, in every ledger of the
            log (an entry holds one or more records).
    """

    position: Position | None
    entries_behind: int

    @property
    def caught_up(self) -> bool:
        """True when the reader has returned every record the bookies confirm."""
        return self.entries_behind == 0


def entries_behind(
    ledgers: Sequence[LedgerInfo], position: Position | None, open_lacs: Mapping[int, int]
) -> int:
    """Confirmed entries at or after ``position`` (None: from the start) (pure).

    ``open_lacs`` holds the last add confirmed of each OPEN ledger at or after the
    position (an OPEN ledger missing from it counts as empty); a closed ledger ends at its
    recorded last entry.
    """
    total = 0
    for info in ledgers:
        last = info.last_entry_id if info.is_closed else open_lacs.get(info.ledger_id, -1)
        if position is None or info.ledger_id > position.ledger_id:
            total += last + 1
        elif info.ledger_id == position.ledger_id:
            total += max(0, last - position.entry_id + 1)
    return total


def last_entries(
    ledgers: Sequence[LedgerInfo], open_lacs: Mapping[int, int], count: int
) -> tuple[Position, Position] | None:
    """Where the last ``count`` confirmed entries of a log begin, and its last confirmed
    entry (slot 0), as ``(start, last)``; None when no entry is confirmed (pure).

    An entry holds one or more records, so the last ``count`` records lie at or after
    ``start``. ``open_lacs`` as for :func:`entries_behind`.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    last: Position | None = None
    start: Position | None = None
    wanted = count
    for info in reversed(ledgers):
        end = info.last_entry_id if info.is_closed else open_lacs.get(info.ledger_id, -1)
        if end < 0:
            continue
        if last is None:
            last = Position(info.ledger_id, end, 0)
        if end + 1 >= wanted:
            return Position(info.ledger_id, end + 1 - wanted, 0), last
        wanted -= end + 1
        start = Position(info.ledger_id, 0, 0)
    return None if start is None or last is None else (start, last)


async def open_ledger_lacs(
    client: LedgerClientLike, ledgers: Sequence[LedgerInfo], password: bytes
) -> dict[int, int]:
    """The last add confirmed of each OPEN ledger of ``ledgers``, as the bookies tell it
    now (never fences; a ledger deleted meanwhile is left out)."""
    open_lacs: dict[int, int] = {}
    for info in ledgers:
        if info.is_closed:
            continue
        with contextlib.suppress(NoSuchLedgerError):  # truncated meanwhile: nothing behind
            handle = await client.open_ledger(info.ledger_id, recovery=False, password=password)
            try:
                lac = handle.last_add_confirmed
                if not handle.is_closed:
                    lac = max(lac, await handle.read_last_add_confirmed())
                open_lacs[info.ledger_id] = lac
            finally:
                await handle.close()
    return open_lacs


async def measure_lag(
    client: LedgerClientLike, name: str, position: Position | None, password: bytes
) -> ReaderLag:
    """The lag of a reader of log ``name`` whose next record is at ``position``: reads the
    log's record and the LAC of each open ledger from there on (never fences)."""
    meta, _ = await read_log(client.ctx.store, name)
    after = [
        info for info in meta.ledgers if position is None or info.ledger_id >= position.ledger_id
    ]
    open_lacs = await open_ledger_lacs(client, after, password)
    return ReaderLag(position, entries_behind(meta.ledgers, position, open_lacs))


__all__ = ["ReaderLag", "entries_behind", "last_entries", "measure_lag", "open_ledger_lacs"]

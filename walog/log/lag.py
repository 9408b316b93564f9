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


async def measure_lag(
    client: LedgerClientLike, name: str, position: Position | None, password: bytes
) -> ReaderLag:
    """The lag of a reader of log ``name`` whose next record is at ``position``: reads the
    log's record and the LAC of each open ledger from there on (never fences)."""
    meta, _ = await read_log(client.ctx.store, name)
    open_lacs: dict[int, int] = {}
    for info in meta.ledgers:
        if info.is_closed or (position is not None and info.ledger_id < position.ledger_id):
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
    return ReaderLag(position, entries_behind(meta.ledgers, position, open_lacs))


__all__ = ["ReaderLag", "entries_behind", "measure_lag"]

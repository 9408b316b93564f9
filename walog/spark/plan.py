"""Pure planning of Spark reads over a log: bounds, partitions and offsets.

No network, store or Spark in here. The driver takes a :class:`LogSnapshot` of the log (its
ledgers and how far each can be read: a closed ledger's last entry, or the open ledger's
last add confirmed captured at planning) and these functions turn it and the requested
bounds into :class:`ReadRange` partitions. Because every bound is a position fixed at
planning time and entries at or below a LAC never change, planning the same bounds twice
reads the same rows: that is what makes batch reruns repeatable and streaming micro-batches
replayable from Spark's checkpoints.

Bounds are half-open: a range reads the records at positions ``start <= p < end``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Literal

from walog.errors import DataLossError
from walog.log.position import Position, ledger_end, ledger_start

Bound = Position | Literal["earliest", "latest"]
"""A position named in an option: an exact one, or one end of the log."""

ORIGIN = Position(0, 0, 0)
"""Before every record of every log (ledger ids are non-negative)."""

DEFAULT_MAX_ENTRIES_PER_PARTITION = 2048


def parse_bound(text: str, option: str) -> Bound:
    """Parse a ``startPosition``/``endPosition`` option value.

    Raises:
        ValueError: not ``earliest``, ``latest`` or ``LEDGER:ENTRY:SLOT``; names the option.
    """
    value = text.strip().lower()
    if value in ("earliest", "latest"):
        return "earliest" if value == "earliest" else "latest"
    try:
        return Position.parse(value)
    except ValueError as exc:
        raise ValueError(
            f"option {option}={text!r}: expected 'earliest', 'latest' or 'LEDGER:ENTRY:SLOT'"
        ) from exc


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerSpan:
    """One ledger of a log as planned: entries ``0..last_entry_id`` are readable.

    Attributes:
        ledger_id: the ledger.
        last_entry_id: its last entry when closed, else the last add confirmed captured at
            planning (-1: nothing readable).
        closed: whether the ledger is closed (its end cannot move any more).
        archive: the archive location when only the archive holds the ledger (it was
            archived and truncated), else None (read from the bookies).
    """

    ledger_id: int
    last_entry_id: int
    closed: bool
    archive: str | None = None

    @property
    def end(self) -> Position:
        """The first position after every readable record of the span."""
        return ledger_end(self.ledger_id, self.last_entry_id)


@dataclasses.dataclass(frozen=True, slots=True)
class LogSnapshot:
    """What planning knows of a log: its ledgers oldest first (those only the archive
    holds first), and what was truncated.

    ``archive_gap`` is set when truncation went past what the archive holds: records from
    ``archived_through`` up to ``truncated_through`` are lost.
    """

    spans: tuple[LedgerSpan, ...]
    truncated_through: Position | None = None
    archive_gap: bool = False

    @property
    def earliest(self) -> Position:
        """The first position still held by the log (ORIGIN when it is empty)."""
        if self.spans:
            return ledger_start(self.spans[0].ledger_id)
        return self.truncated_through or ORIGIN

    @property
    def latest(self) -> Position:
        """The position right after the last readable record."""
        if self.spans:
            return self.spans[-1].end
        return self.earliest


@dataclasses.dataclass(frozen=True, slots=True)
class ReadRange:
    """One partition: entries ``first_entry..last_entry`` of one ledger.

    Records before ``start`` or at/after ``end`` are dropped (a bound may fall inside an
    entry, between two of its slots). Plain data, so it pickles to executors.
    """

    ledger_id: int
    first_entry: int
    last_entry: int
    start: Position
    end: Position
    closed: bool
    archive: str | None = None

    @property
    def entries(self) -> int:
        """How many entries the range reads."""
        return self.last_entry - self.first_entry + 1

    def keeps(self, position: Position) -> bool:
        """True when the record at ``position`` belongs to this range."""
        return self.start <= position < self.end


def resolve(snapshot: LogSnapshot, bound: Bound) -> Position:
    """The position a bound names in this snapshot."""
    if bound == "earliest":
        return snapshot.earliest
    if bound == "latest":
        return snapshot.latest
    return bound


def check_start(snapshot: LogSnapshot, start: Position, *, fail_on_data_loss: bool) -> Position:
    """Where reading from ``start`` really begins, given truncation.

    A start before the first record the bookies or the archive hold, or a read across
    records truncated past the archive, means records were lost: with
    ``fail_on_data_loss`` that raises, otherwise reading skips to the first survivor.

    Raises:
        DataLossError: ``start`` was truncated and ``fail_on_data_loss`` is set.
    """
    gone = snapshot.truncated_through
    first = snapshot.earliest
    # Between truncated_through and the first listed ledger there never were records.
    if gone is None or start >= gone:
        return start
    if start >= first and not snapshot.archive_gap:
        return start  # truncated, but the archive holds it
    if fail_on_data_loss:
        where = "the log now starts at" if start < first else "records are lost up to"
        raise DataLossError(
            f"position {start} was truncated and is not in the archive; {where} "
            f"{first if start < first else gone} (read from 'earliest', or set "
            "failOnDataLoss=false to skip the lost records)"
        )
    return max(start, first)


def plan_ranges(
    snapshot: LogSnapshot,
    start: Position,
    end: Position,
    *,
    max_entries: int = DEFAULT_MAX_ENTRIES_PER_PARTITION,
) -> list[ReadRange]:
    """Partitions reading every record of the snapshot at ``start <= p < end``, in log order.

    One range per ledger, split into ranges of at most ``max_entries`` entries. Empty
    ledgers and ledgers outside the bounds get none.

    Raises:
        ValueError: ``max_entries < 1``.
    """
    if max_entries < 1:
        raise ValueError(f"maxEntriesPerPartition must be >= 1, got {max_entries}")
    ranges: list[ReadRange] = []
    for span in snapshot.spans:
        first = start.entry_id if span.ledger_id == start.ledger_id else 0
        if span.ledger_id < start.ledger_id or span.ledger_id > end.ledger_id:
            continue
        last = span.last_entry_id
        if span.ledger_id == end.ledger_id:
            # An end at slot 0 excludes its entry; one at slot > 0 keeps its lower slots.
            last = min(last, end.entry_id - 1 if end.slot == 0 else end.entry_id)
        for lo in range(first, last + 1, max_entries):
            hi = min(last, lo + max_entries - 1)
            ranges.append(ReadRange(span.ledger_id, lo, hi, start, end, span.closed, span.archive))
    return ranges


def advance_by_records(
    counts: Iterable[tuple[int, int, int]], start: Position, max_records: int
) -> Position | None:
    """The end position that admits at most ``max_records`` records after ``start``.

    Args:
        counts: ``(ledger_id, entry_id, records_in_entry)`` of the entries from ``start``'s
            entry onwards, in log order.
        start: the first position to read.
        max_records: the limit (>= 1).

    Returns:
        The exclusive end (it may fall inside an entry), or None when the entries given hold
        no more than ``max_records`` records after ``start`` (the caller's own end applies).
    """
    left = max_records
    for ledger_id, entry_id, records in counts:
        first_slot = start.slot if (ledger_id, entry_id) == (start.ledger_id, start.entry_id) else 0
        available = max(0, records - first_slot)
        if available > left:
            return Position(ledger_id, entry_id, first_slot + left)
        left -= available
    return None


__all__ = [
    "DEFAULT_MAX_ENTRIES_PER_PARTITION",
    "ORIGIN",
    "Bound",
    "LedgerSpan",
    "LogSnapshot",
    "ReadRange",
    "advance_by_records",
    "check_start",
    "parse_bound",
    "plan_ranges",
    "resolve",
]

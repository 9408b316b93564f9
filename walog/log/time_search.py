"""Finding the first record of a log at or after a time (pure; docs/time.md).

Timestamps never decrease within a log (walog.log.writer), so both the ledgers' last
timestamps and the entries' last timestamps within a ledger are sorted: the search is a
binary search over the ledgers, then over the entries of the one ledger that holds the
answer, then a scan of that entry's records.

The search is sans-I/O: :func:`search` is a generator that yields each entry it needs as
``(ledger_id, entry_id)`` and is sent back that entry's record timestamps; whoever drives
it reads them from bookies or from the archive (walog.log.time_seek), and a test drives it
over a list and counts. It asks for no entry twice and, in each ledger it looks into, for
at most ``ceil(log2(entries)) + 2`` entries (:func:`read_bound`): the last entry of a
ledger whose time range the log's record lacks, then a binary search over entry ids
``0 .. last`` knowing that the last entry holds the answer, then the entry found unless it
was read already.

Timestamps compare at microsecond resolution (:func:`micros`), the archive's: a record is
at or after ``t`` when its timestamp rounded to the microsecond is at or after ``t``
rounded the same way, so a range gives the same answer on bookies and in the archive.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Generator, Sequence

from walog.log.position import Position, unchecked_position

Need = tuple[int, int]
"""An entry the search reads next: ``(ledger_id, entry_id)``."""
Search = Generator[Need, Sequence[int], Position | None]
""":func:`search`: yields the entries it needs, is sent their records' timestamps (in
microseconds, :func:`micros`), returns the position found."""


def micros(seconds: float) -> int:
    """A timestamp in whole microseconds (rounded half to even, as the archive stores it)."""
    return round(seconds * 1_000_000)


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    """A non-empty ledger the search may look into.

    Attributes:
        ledger_id: the ledger.
        last_entry_id: its last entry (>= 0): the recorded end of a CLOSED ledger, the last
            add confirmed of an OPEN one.
        times: its first and last records' timestamps in microseconds, when known without
            reading (the log's record, the archive's statistics); None otherwise.
    """

    ledger_id: int
    last_entry_id: int
    times: tuple[int, int] | None = None


def read_bound(entries: int) -> int:
    """The most entries the search reads in one ledger of ``entries`` entries."""
    return math.ceil(math.log2(entries)) + 2 if entries > 0 else 0


def search(t: int, spans: Sequence[Span]) -> Search:
    """The position of the first record with a timestamp (microseconds) at or after ``t``
    in ``spans`` (non-empty ledgers, in log order), None when every record is before it.

    A generator: see the module doc. Assumes timestamps never decrease along ``spans``;
    where they do (records of writers older than this rule), it still returns a record at
    or after ``t``, when one of the ledgers and entries it looks at holds one.
    """
    cache: dict[Need, Sequence[int]] = {}

    def read(ledger_id: int, entry_id: int) -> Generator[Need, Sequence[int], Sequence[int]]:
        need = (ledger_id, entry_id)
        stamps = cache.get(need)
        if stamps is None:
            stamps = yield need
            cache[need] = stamps
        return stamps

    def last_of(span: Span) -> Generator[Need, Sequence[int], int]:
        if span.times is not None:
            return span.times[1]
        return (yield from read(span.ledger_id, span.last_entry_id))[-1]

    lo, hi = 0, len(spans)
    while lo < hi:
        mid = (lo + hi) // 2
        if (yield from last_of(spans[mid])) >= t:
            hi = mid
        else:
            lo = mid + 1
    if lo == len(spans):
        return None
    span = spans[lo]
    ledger_id = span.ledger_id
    if span.times is not None and span.times[0] >= t:
        return unchecked_position(ledger_id, 0, 0)
    # The span's last entry ends at or after t: find the first entry that does.
    first, last = 0, span.last_entry_id
    while first < last:
        mid = (first + last) // 2
        if (yield from read(ledger_id, mid))[-1] >= t:
            last = mid
        else:
            first = mid + 1
    stamps = yield from read(ledger_id, first)
    for slot, stamp in enumerate(stamps):
        if stamp >= t:
            return unchecked_position(ledger_id, first, slot)
    # Only where the recorded range disagrees with the entries: go on after this entry.
    if first < span.last_entry_id:
        return unchecked_position(ledger_id, first + 1, 0)
    return unchecked_position(spans[lo + 1].ledger_id, 0, 0) if lo + 1 < len(spans) else None


def run(t: int, spans: Sequence[Span], read: dict[Need, Sequence[int]]) -> Position | None:
    """:func:`search` driven over ``read`` (entry -> its records' timestamps): for tests
    and for callers that hold the entries already."""
    steps = search(t, spans)
    try:
        need = next(steps)
        while True:
            need = steps.send(read[need])
    except StopIteration as stop:
        result: Position | None = stop.value
        return result


def timestamp_argument(value: object, argument: str = "at") -> float:
    """``value`` as seconds since the epoch: an int or float of seconds, or a
    ``datetime.datetime`` that carries its time zone.

    Raises:
        TypeError: anything else (a str, a date, None ...); names ``argument``.
        ValueError: a naive datetime (which zone it is in is unknown), or a number that is
            not finite; names ``argument`` and what is accepted.
    """
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise ValueError(
                f"{argument}: {value!r} is a naive datetime; give one with a time zone "
                "(e.g. datetime.now(timezone.utc)) or seconds since the epoch"
            )
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"{argument}: {value!r} is not a finite number of seconds")
        return seconds
    raise TypeError(
        f"{argument} must be seconds since the epoch (int or float) or a datetime with a "
        f"time zone, got {type(value).__name__} {value!r}"
    )


__all__ = [
    "Need",
    "Search",
    "Span",
    "micros",
    "read_bound",
    "run",
    "search",
    "timestamp_argument",
]

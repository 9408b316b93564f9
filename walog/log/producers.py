"""Producer sessions: which (producer, seq) pairs a log holds, and where (pure).

A writer opened with a producer (``open_writer(producer="svc-7")``) tags each record with
that name and a sequence number (walog.log.records, entry format 2). Appending a pair the
log already holds returns the record's original position instead of writing it again
(docs/logs.md, "Producer sessions"). :class:`ProducerTable` decides that: per producer, the
last seq accepted and the positions of its last :data:`WINDOW` records written.

Rules of a producer's seqs:

- without a seq, the writer numbers the record itself: the last seq + 1 (0 for a new one);
- a seq above the last is accepted, with or without a gap (callers that number their own
  commands may skip numbers: a command that never reached the log is not retried);
- a seq within the window returns its position (or, still in flight, waits for it);
- a seq at or below the last that the window does not hold was skipped:
  :class:`walog.SequenceError`; one below the window's oldest is too old to tell:
  :class:`walog.SequenceTooOldError`. Neither is ever written again.

The table is carried forward in the log's record (walog.log.log_metadata, ``producers``)
at every roll and after every takeover, with the position of the last record it covers; a
writer that takes over reads it and the records after that position (walog.log.sessions).
It is bounded: at most :data:`MAX_PRODUCERS` producers, the least recently used ones
evicted first, and any idle for more than :data:`IDLE_SECONDS` (by their records'
timestamps) dropped when it is stored. An evicted producer starts afresh: its next seq is
accepted whatever it is.

No I/O, no clock: times are the records' own timestamps.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from walog.errors import SequenceError, SequenceTooOldError
from walog.log.position import Position

WINDOW = 64
"""Records per producer whose positions are kept: a retry of an older seq is refused."""
MAX_PRODUCERS = 128
"""Producers kept at most; the least recently used one goes first."""
IDLE_SECONDS = 7 * 24 * 3600.0
"""A producer without a record for this long (its records' timestamps) is not stored."""
TABLE_FORMAT = 1
"""The version of the ``producers`` field of a log's record."""


@dataclasses.dataclass(slots=True)
class ProducerState:
    """What the log holds of one producer.

    Attributes:
        last_seq: the highest seq accepted (written, or in flight on this writer).
        window: seq -> position of its last records written, oldest first.
        pending: seqs in flight on this writer (accepted, not acknowledged yet).
        stamp: the timestamp of its last record.
    """

    last_seq: int
    window: collections.OrderedDict[int, Position] = dataclasses.field(
        default_factory=collections.OrderedDict
    )
    pending: set[int] = dataclasses.field(default_factory=set)
    stamp: float = 0.0

    def remember(self, seq: int, position: Position, window: int) -> None:
        """``seq`` is in the log at ``position``: into the window, whose oldest record
        goes beyond ``window`` records."""
        self.window[seq] = position
        if len(self.window) > window:
            self.window.popitem(last=False)


Admission = tuple[Literal["new", "written", "pending"], int, Position | None]
"""What :meth:`ProducerTable.admit` decided: ``("new", seq, None)`` to write it,
``("written", seq, position)`` when the log holds it, ``("pending", seq, None)`` while it
is in flight on this writer."""


class ProducerTable:
    """Per producer, the last seq and the positions of a window of recent ones.

    Args:
        window: records per producer whose positions are kept.
        max_producers: producers kept at most (least recently used evicted first).

    Attributes:
        last: the position of the last record this table covers (every record of the log
            up to it was folded in; None: it covers no record).
    """

    def __init__(self, window: int = WINDOW, max_producers: int = MAX_PRODUCERS) -> None:
        if window < 1 or max_producers < 1:
            raise ValueError(f"window and max_producers must be >= 1: {window}, {max_producers}")
        self._window = window
        self._max = max_producers
        self._producers: collections.OrderedDict[str, ProducerState] = collections.OrderedDict()
        self.last: Position | None = None

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer: object) -> bool:
        return producer in self._producers

    def state(self, producer: str) -> ProducerState | None:
        """The state of ``producer``, None when the table does not know it."""
        return self._producers.get(producer)

    def admit(self, producer: str, seq: int | None) -> Admission:
        """Decide about a record of ``producer`` with ``seq`` (None: the next one).

        Raises:
            SequenceTooOldError: ``seq`` is below the oldest one the window holds.
            SequenceError: ``seq`` was skipped (at or below the last, never written).
        """
        state = self._producers.get(producer)
        if state is None:
            return "new", 0 if seq is None else seq, None
        if seq is None or seq > state.last_seq:
            return "new", state.last_seq + 1 if seq is None else seq, None
        position = state.window.get(seq)
        if position is not None:
            return "written", seq, position
        if seq in state.pending:
            return "pending", seq, None
        known = [*state.window, *state.pending]
        if not known or seq < min(known):
            raise SequenceTooOldError(
                f"producer {producer!r}: seq {seq} is older than the {self._window} records "
                f"whose positions are kept (last seq {state.last_seq}); whether it is in the "
                "log cannot be told, so it is not written again"
            )
        raise SequenceError(
            f"producer {producer!r}: seq {seq} was skipped (its last seq is "
            f"{state.last_seq} and seq {seq} was never written): seqs only increase, so it "
            "is not written now"
        )

    @property
    def states(self) -> Mapping[str, ProducerState]:
        """Producer -> its state (live: the writer's path reads it without a call)."""
        return self._producers

    @property
    def window(self) -> int:
        """Records per producer whose positions are kept."""
        return self._window

    def take(
        self, producer: str, seq: int | None, stamp: float
    ) -> tuple[ProducerState, int] | None:
        """Accept ``seq`` of ``producer`` (None: the last + 1) when it is above the last
        (:meth:`admit` would say ``"new"``, and :meth:`accept` follows): the producer's
        state and the seq. None when it is not: :meth:`admit` decides. One call on the
        writer's path of every record."""
        state = self._producers.get(producer)
        if state is None:
            seq = 0 if seq is None else seq
            state = self._producers[producer] = ProducerState(last_seq=seq)
            state.pending.add(seq)
            self._evict()
        elif seq is None:
            seq = state.last_seq + 1
        elif seq <= state.last_seq:
            return None
        state.last_seq = seq
        state.pending.add(seq)
        state.stamp = stamp
        return state, seq

    def accept(self, producer: str, seq: int, stamp: float) -> None:
        """``seq`` of ``producer`` goes to the log now (:meth:`admit` said ``"new"``)."""
        state = self._get(producer, seq)
        state.last_seq = seq
        state.pending.add(seq)
        state.stamp = stamp

    def written(self, producer: str, seq: int, position: Position, stamp: float) -> None:
        """``seq`` of ``producer`` is in the log at ``position`` (acknowledged, or found in
        the log by a takeover); seqs of a producer come in increasing order."""
        state = self._get(producer, seq)
        state.pending.discard(seq)
        if seq > state.last_seq:
            state.last_seq = seq
        state.remember(seq, position, self._window)
        state.stamp = max(state.stamp, stamp)

    def failed(self, producer: str, seq: int) -> None:
        """``seq`` of ``producer`` did not go to the log (it stays skipped)."""
        state = self._producers.get(producer)
        if state is not None:
            state.pending.discard(seq)

    def _get(self, producer: str, seq: int) -> ProducerState:
        producers = self._producers
        state = producers.get(producer)
        if state is None:
            state = producers[producer] = ProducerState(last_seq=seq)
            self._evict(keep=producer)
        return state

    def _evict(self, keep: str | None = None) -> None:
        """Forget the least recently used producers (by their last record's timestamp)
        beyond the bound; one with a seq in flight stays, as does ``keep``."""
        producers = self._producers
        while len(producers) > self._max:
            idle = [(s.stamp, n) for n, s in producers.items() if not s.pending and n != keep]
            if not idle:
                return
            del producers[min(idle)[1]]

    def newest_stamp(self) -> float:
        """The newest timestamp of a producer's last record (0.0 when there is none)."""
        return max((state.stamp for state in self._producers.values()), default=0.0)

    # -- stored form -----------------------------------------------------------------------

    def to_doc(self, now: float) -> dict[str, Any]:
        """The JSON form kept in the log's record: producers idle for more than
        :data:`IDLE_SECONDS` before ``now`` are left out, as are seqs in flight.

        ``{"format": 1, "last": "7:12:0" | null, "producers": {"svc-7": {"seq": 41,
        "stamp": 1.7e9, "window": [[40, "7:11:0"], [41, "7:12:0"]]}}}``
        """
        producers: dict[str, Any] = {}
        for name, state in self._producers.items():
            if now - state.stamp > IDLE_SECONDS or not state.window:
                continue
            producers[name] = {
                "seq": max(state.window),
                "stamp": state.stamp,
                "window": [[seq, str(position)] for seq, position in state.window.items()],
            }
        return {
            "format": TABLE_FORMAT,
            "last": None if self.last is None else str(self.last),
            "producers": producers,
        }

    @classmethod
    def from_doc(
        cls, doc: Any, window: int = WINDOW, max_producers: int = MAX_PRODUCERS
    ) -> ProducerTable:
        """Parse :meth:`to_doc`'s form.

        Raises:
            ValueError: it does not parse, or is of a newer format (the message says which).
        """
        if not isinstance(doc, dict):
            raise ValueError(f"expected a JSON object, got {doc!r}")
        if doc.get("format") != TABLE_FORMAT:
            raise ValueError(
                f"producer table format {doc.get('format')!r}; this walog reads {TABLE_FORMAT}"
            )
        table = cls(window, max_producers)
        last = doc.get("last")
        table.last = None if last is None else Position.parse(_str(last))
        producers = doc.get("producers", {})
        if not isinstance(producers, dict):
            raise ValueError(f"producers: expected a JSON object, got {producers!r}")
        for name, item in sorted(producers.items(), key=lambda kv: _stamp(kv[1])):
            if not isinstance(item, dict) or not isinstance(item.get("window"), list):
                raise ValueError(f"producer {name!r}: malformed {item!r}")
            stamp = _stamp(item)
            for pair in item["window"]:
                if not (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int):
                    raise ValueError(f"producer {name!r}: malformed window item {pair!r}")
                table.written(name, pair[0], Position.parse(_str(pair[1])), stamp)
        return table


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r}")
    return value


def _stamp(item: Any) -> float:
    stamp = item.get("stamp") if isinstance(item, dict) else None
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        raise ValueError(f"producer item without a numeric stamp: {item!r}")
    return float(stamp)


def parse_table_doc(raw: Any) -> dict[str, Any]:
    """``raw`` when it is a producer table this version reads (the log's record keeps the
    JSON as stored; a takeover parses it with :meth:`ProducerTable.from_doc`).

    Raises:
        ValueError: it does not parse.
    """
    ProducerTable.from_doc(raw)
    assert isinstance(raw, dict)
    return raw


__all__ = [
    "IDLE_SECONDS",
    "MAX_PRODUCERS",
    "TABLE_FORMAT",
    "WINDOW",
    "Admission",
    "ProducerState",
    "ProducerTable",
    "parse_table_doc",
]

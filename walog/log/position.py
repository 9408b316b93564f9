"""Positions, records and segments of a log.

A log is an ordered list of ledgers; each ledger entry packs one or more records
(walog.log.records). A record's position is ``(ledger_id, entry_id, slot)``: the ledger,
the entry in it and the record's index inside the entry. Ledger ids grow strictly (they come
from one counter, and a log only ever appends newer ledgers), so ordering positions as
tuples orders them as the log does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, NamedTuple

from walog._compiled import compiled_module
from walog._sinks import ALREADY_SETTLED, Sink

SegmentState = Literal["OPEN", "CLOSED"]


class _PositionFields(NamedTuple):
    ledger_id: int
    entry_id: int
    slot: int


class Position(_PositionFields):
    """Where a record lives in a log: ledger, entry in the ledger, slot in the entry.

    Ordered like the log, hashable, and ``str(position)`` is ``"LEDGER:ENTRY:SLOT"``, which
    :meth:`parse` turns back into an equal position. A named tuple: immutable, built,
    compared and hashed in C (the log writer and readers make one per record), and equal to
    the plain tuple of its fields.

    Raises:
        ValueError: a field is negative or not an int.
    """

    __slots__ = ()

    def __new__(cls, ledger_id: int, entry_id: int, slot: int) -> Position:
        # Fast path: three plain non-negative ints (OR of non-negative ints is non-negative;
        # one negative makes it negative). Anything else gets the field-by-field check.
        if not (
            type(ledger_id) is int
            and type(entry_id) is int
            and type(slot) is int
            and (ledger_id | entry_id | slot) >= 0
        ):
            _check_fields(ledger_id=ledger_id, entry_id=entry_id, slot=slot)
        return _new_tuple(cls, (ledger_id, entry_id, slot))

    def __str__(self) -> str:
        return f"{self[0]}:{self[1]}:{self[2]}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse ``"LEDGER:ENTRY:SLOT"`` (three non-negative decimal integers).

        Raises:
            ValueError: the text is not in that form.
        """
        if not isinstance(text, str):
            raise ValueError(f"a position is text 'LEDGER:ENTRY:SLOT', got {text!r}")
        parts = text.strip().split(":")
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
            raise ValueError(
                f"bad position {text!r}: expected 'LEDGER:ENTRY:SLOT' "
                "with three non-negative integers"
            )
        return cls(int(parts[0]), int(parts[1]), int(parts[2]))

    def entry_start(self) -> Position:
        """The first position of this position's entry (slot 0)."""
        return _new_tuple(Position, (self[0], self[1], 0))


_new_tuple = tuple.__new__


def _check_fields(**fields: object) -> None:
    for name, value in fields.items():
        # bool is an int subclass; a True slot is a bug, not a position.
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"Position.{name} must be an int, got {value!r}")
        if value < 0:
            raise ValueError(f"Position.{name} must be >= 0, got {value}")


def position_argument(value: object, argument: str) -> Position:
    """``value`` as a :class:`Position`: a Position, or text ``"LEDGER:ENTRY:SLOT"`` parsed
    strictly. Every position a caller hands to an API that stores it goes through here, so
    nothing else ever reaches a log's metadata.

    Raises:
        TypeError: ``value`` is neither (an int, None, bytes, a tuple ...); names
            ``argument``.
        ValueError: text that is not three non-negative integers; names ``argument``.
    """
    if isinstance(value, Position):
        return value
    if isinstance(value, str):
        try:
            return Position.parse(value)
        except ValueError as exc:
            raise ValueError(f"{argument}: {exc}") from None
    raise TypeError(
        f"{argument} must be a walog.Position or text 'LEDGER:ENTRY:SLOT', "
        f"got {type(value).__name__} {value!r}"
    )


def unchecked_position(ledger_id: int, entry_id: int, slot: int) -> Position:
    """A :class:`Position` built without validation, for fields the caller guarantees are
    non-negative ints (the log writer's own ledger id, acked entry id and slot index; a
    reader's entry ids and slots).

    Equal, hashed and ordered exactly like ``Position(ledger_id, entry_id, slot)``, at a
    fraction of the cost: the log writer and readers make one per record.
    """
    return _new_tuple(Position, (ledger_id, entry_id, slot))


def _resolve_positions_python(
    sinks: Sequence[Sink[Position]], ledger_id: int, entry_id: int
) -> None:
    # The ids come from the ledger and the slots from enumerate: valid by construction,
    # so each record's position skips Position's validation.
    for slot, sink in enumerate(sinks):
        try:  # noqa: SIM105 (suppress() would cost a context manager per record)
            sink.set_result(unchecked_position(ledger_id, entry_id, slot))
        except ALREADY_SETTLED:
            pass  # its caller cancelled it


_fast = compiled_module("walog.log._fastrecords")


def resolve_positions(sinks: Sequence[Sink[Position]], ledger_id: int, entry_id: int) -> None:
    """Resolve the records of acknowledged entry ``entry_id`` of ledger ``ledger_id``:
    ``sinks[slot]`` with the position of slot ``slot`` (made as :func:`unchecked_position`
    makes it), passing over a sink its caller cancelled. Compiled
    (walog/log/_fastrecords.c) unless ``WALOG_PURE_PYTHON`` asks for pure Python."""
    if _fast is not None:
        _fast.resolve(sinks, ledger_id, entry_id, Position, ALREADY_SETTLED)
    else:
        _resolve_positions_python(sinks, ledger_id, entry_id)


def ledger_start(ledger_id: int) -> Position:
    """The first position a ledger can hold."""
    return Position(ledger_id, 0, 0)


def ledger_end(ledger_id: int, last_entry_id: int) -> Position:
    """The first position after every record of a ledger whose last entry is known.

    Every record of the ledger is strictly before it, and nothing of later ledgers is.
    """
    return Position(ledger_id, last_entry_id + 1, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One record read from a log.

    Attributes:
        position: where it lives in the log.
        data: the payload the writer appended.
        timestamp: the writer's wall clock when it appended the record (seconds since
            the epoch, float).
        producer: the producer whose session wrote it, None for a record without one
            (docs/logs.md, "Producer sessions"; the archive does not keep it).
        seq: its sequence number in that session, None without a producer.
    """

    position: Position
    data: bytes
    timestamp: float
    producer: str | None = None
    seq: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Segment:
    """One ledger of a log, as the log's metadata lists it (oldest first).

    Attributes:
        ledger_id: the ledger.
        state: ``"OPEN"`` while a writer may still add to it, ``"CLOSED"`` once its end is
            fixed (closed by its writer on a roll, or recovered by a takeover).
        first_position: the first position the segment can hold.
        last_entry_id: its last entry when CLOSED (-1 if empty); -1 while OPEN.
    """

    ledger_id: int
    state: SegmentState
    first_position: Position
    last_entry_id: int


__all__ = [
    "Position",
    "Record",
    "Segment",
    "SegmentState",
    "ledger_end",
    "ledger_start",
    "position_argument",
    "unchecked_position",
]

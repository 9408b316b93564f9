"""The history checker: what the writers saw acknowledged against what readers read back.

Pure: it takes the parsed ack files and reader outputs and returns violations, each naming
the rule it breaks and the records involved. Rules:

- ``readers_disagree``: two independent fresh readers read different sequences.
- ``read_damaged``: a record read back with bytes that are not the ones appended.
- ``read_out_of_order``: a reader's positions are not strictly increasing.
- ``duplicate``: one record key appears twice in the log.
- ``ack_lost``: an acknowledged record is not in the log.
- ``ack_moved``: an acknowledged record is in the log at another position than acknowledged.
- ``writer_order``: one writer's records are not in (incarnation, seq) order in the log.
- ``unknown_record``: the log holds a record no writer ever appended (key out of range).
- ``tail_not_prefix``: what a reader tailing the log during the faults returned is not a
  prefix of the final log (it saw a record that later vanished or moved, or skipped one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tests.chaos.records import RecordKey
from walog.log.position import Position


@dataclasses.dataclass(frozen=True)
class Ack:
    """One acknowledged append, as its writer recorded it."""

    key: RecordKey
    position: Position


@dataclasses.dataclass(frozen=True)
class ReadRecord:
    """One record as a reader returned it."""

    position: Position
    key: RecordKey
    intact: bool


@dataclasses.dataclass(frozen=True)
class Violation:
    """A broken rule and what shows it."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


@dataclasses.dataclass
class History:
    """Everything one run produced."""

    acks: list[Ack]
    reads: dict[str, list[ReadRecord]]
    sent: Mapping[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    """Upper bound of sequence numbers sent per (writer, incarnation), when known."""
    tail: list[ReadRecord] | None = None
    """What a reader tailing during the faults read, when one ran."""


MAX_REPORTED = 10


def check(history: History) -> list[Violation]:
    """All violations of the rules above (at most ``MAX_REPORTED`` per rule)."""
    found: list[Violation] = []
    if not history.reads:
        return [Violation("no_reader", "no reader output to check")]
    names = sorted(history.reads)
    reference = history.reads[names[0]]
    for name in names[1:]:
        found += _compare_readers(names[0], reference, name, history.reads[name])
    for name in names:
        found += _check_sequence(name, history.reads[name], history.sent)
    found += _check_acks(history.acks, reference)
    if history.tail is not None:
        found += _check_prefix(history.tail, reference)
    return _cap(found)


def _check_prefix(tail: Sequence[ReadRecord], final: Sequence[ReadRecord]) -> list[Violation]:
    for index, record in enumerate(tail):
        if index >= len(final):
            return [
                Violation(
                    "tail_not_prefix",
                    f"tail read {record.key}@{record.position} "
                    f"past the end of the final log ({len(final)} records)",
                )
            ]
        expected = final[index]
        if (record.position, record.key) != (expected.position, expected.key):
            return [
                Violation(
                    "tail_not_prefix",
                    f"tail record {index} is "
                    f"{record.key}@{record.position}, the final log has "
                    f"{expected.key}@{expected.position}",
                )
            ]
    return []


def _compare_readers(
    name_a: str, a: Sequence[ReadRecord], name_b: str, b: Sequence[ReadRecord]
) -> list[Violation]:
    for index, (left, right) in enumerate(zip(a, b, strict=False)):
        if (left.position, left.key) != (right.position, right.key):
            return [
                Violation(
                    "readers_disagree",
                    f"at record {index}: {name_a} read {left.key}@{left.position}, "
                    f"{name_b} read {right.key}@{right.position}",
                )
            ]
    if len(a) != len(b):
        return [
            Violation(
                "readers_disagree",
                f"{name_a} read {len(a)} records, {name_b} read {len(b)} (same prefix)",
            )
        ]
    return []


def _check_sequence(
    name: str, records: Sequence[ReadRecord], sent: Mapping[tuple[int, int], int]
) -> list[Violation]:
    found: list[Violation] = []
    seen: dict[RecordKey, Position] = {}
    last_of_writer: dict[int, ReadRecord] = {}
    previous: Position | None = None
    for record in records:
        if not record.intact:
            found.append(Violation("read_damaged", f"{name}: {record.key}@{record.position}"))
        if previous is not None and record.position <= previous:
            found.append(
                Violation("read_out_of_order", f"{name}: {record.position} after {previous}")
            )
        previous = record.position
        if record.key in seen:
            found.append(
                Violation(
                    "duplicate",
                    f"{name}: {record.key} at {seen[record.key]} and {record.position}",
                )
            )
        seen.setdefault(record.key, record.position)
        bound = sent.get((record.key.writer, record.key.incarnation))
        if sent and (bound is None or record.key.seq > bound):
            found.append(Violation("unknown_record", f"{name}: {record.key}@{record.position}"))
        before = last_of_writer.get(record.key.writer)
        if before is not None and (before.key.incarnation, before.key.seq) >= (
            record.key.incarnation,
            record.key.seq,
        ):
            found.append(
                Violation(
                    "writer_order",
                    f"{name}: {record.key}@{record.position} after {before.key}@{before.position}",
                )
            )
        last_of_writer[record.key.writer] = record
    return found


def _check_acks(acks: Sequence[Ack], records: Sequence[ReadRecord]) -> list[Violation]:
    found: list[Violation] = []
    where = {record.key: record.position for record in records}
    for ack in acks:
        position = where.get(ack.key)
        if position is None:
            found.append(Violation("ack_lost", f"{ack.key} acknowledged at {ack.position}"))
        elif position != ack.position:
            found.append(
                Violation(
                    "ack_moved", f"{ack.key} acknowledged at {ack.position}, read at {position}"
                )
            )
    return found


def _cap(violations: list[Violation]) -> list[Violation]:
    counts: dict[str, int] = {}
    kept = []
    for violation in violations:
        counts[violation.rule] = counts.get(violation.rule, 0) + 1
        if counts[violation.rule] <= MAX_REPORTED:
            kept.append(violation)
    for rule, count in counts.items():
        if count > MAX_REPORTED:
            kept.append(Violation(rule, f"... and {count - MAX_REPORTED} more"))
    return kept

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
- ``epoch_order``: a record of a later writer epoch (takeover) lies in the log before one of
  an earlier epoch.
- ``under_replicated``: after the heal, a fragment has a bookie of its ensemble that is not
  live or lacks part of its share of the fragment's entries (fewer than Qw copies of some
  entry on live bookies).
- ``retired_bookie_named``: a fragment still names a decommissioned bookie.

When retention deleted the head of the log (``History.truncated_through``), the final
readers start after it: the tailing reader's records before that point stand in for the
deleted ones, so acknowledged records there are still checked (the tail may lag, but
retention never deletes what its subscription has not passed).
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
    epochs: Mapping[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    """The log's epoch each (writer, incarnation) took it over at, when known."""
    truncated_through: Position | None = None
    """Every record before it was deleted by retention (the log's metadata says so)."""
    replication: Replication | None = None
    """What a survey of the bookies found once every fault was healed, when one ran."""


@dataclasses.dataclass(frozen=True)
class FragmentCopies:
    """One fragment of a ledger (entries ``first_entry_id..last_entry_id`` on ``ensemble``)
    and the bookies of its ensemble that served every entry of their share."""

    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    ensemble: tuple[str, ...]
    holding: frozenset[str]


@dataclasses.dataclass(frozen=True)
class Replication:
    """A survey of every fragment once the faults are healed.

    Attributes:
        fragments: the fragments that hold entries.
        live: the bookies registered (writable or read-only) at the survey.
        retired: decommissioned bookies, which no fragment may name any more.
    """

    fragments: list[FragmentCopies]
    live: frozenset[str]
    retired: frozenset[str] = frozenset()


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
    whole = _whole_log(history, reference)
    for name in names:
        records, label = history.reads[name], name
        if name == names[0] and len(whole) > len(reference):
            records, label = whole, f"{name} after the tail's deleted head"
        found += _check_sequence(label, records, history.sent, history.epochs)
    found += _check_acks(history.acks, whole)
    if history.tail is not None:
        found += _check_prefix(history.tail, whole)
    if history.replication is not None:
        found += check_replication(history.replication)
    return _cap(found)


def _whole_log(history: History, reference: list[ReadRecord]) -> list[ReadRecord]:
    """The log as it was written: the tail's records of the head retention deleted, then
    what the final reader read."""
    cut = history.truncated_through
    if cut is None or not history.tail:
        return reference
    return [record for record in history.tail if record.position < cut] + reference


def check_replication(replication: Replication) -> list[Violation]:
    """Violations of ``under_replicated`` and ``retired_bookie_named`` alone (a harness
    waiting for repairs to finish asks this until it is empty)."""
    found: list[Violation] = []
    for fragment in replication.fragments:
        entries = f"{fragment.first_entry_id}..{fragment.last_entry_id}"
        where = f"ledger {fragment.ledger_id} entries {entries}"
        retired = sorted(set(fragment.ensemble) & replication.retired)
        if retired:
            found.append(Violation("retired_bookie_named", f"{where} names {', '.join(retired)}"))
        short = [
            b for b in fragment.ensemble if b not in replication.live or b not in fragment.holding
        ]
        if short:
            lacking = [
                f"{b} ({'not live' if b not in replication.live else 'lacks entries'})"
                for b in short
            ]
            found.append(
                Violation(
                    "under_replicated",
                    f"{where} on {', '.join(fragment.ensemble)}: {', '.join(lacking)}",
                )
            )
    return found


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
    name: str,
    records: Sequence[ReadRecord],
    sent: Mapping[tuple[int, int], int],
    epochs: Mapping[tuple[int, int], int],
) -> list[Violation]:
    found: list[Violation] = []
    seen: dict[RecordKey, Position] = {}
    last_of_writer: dict[int, ReadRecord] = {}
    previous: Position | None = None
    latest: tuple[int, ReadRecord] | None = None  # the highest epoch so far, and its record
    for record in records:
        epoch = epochs.get((record.key.writer, record.key.incarnation))
        if epoch is not None:
            if latest is not None and epoch < latest[0]:
                found.append(
                    Violation(
                        "epoch_order",
                        f"{name}: {record.key}@{record.position} of epoch {epoch} after "
                        f"{latest[1].key}@{latest[1].position} of epoch {latest[0]}",
                    )
                )
            if latest is None or epoch > latest[0]:
                latest = (epoch, record)
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

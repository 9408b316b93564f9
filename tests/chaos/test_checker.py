"""The history checker bites: each rule flags a history built to break it, and only that."""

from __future__ import annotations

import pytest

from tests.chaos.checker import (
    Ack,
    FragmentCopies,
    History,
    ReadRecord,
    Replication,
    check,
)
from tests.chaos.nemesis import make_schedule, timeline
from tests.chaos.records import RecordKey, decode, payload
from walog.log.position import Position


def _key(writer: int, seq: int, incarnation: int = 1) -> RecordKey:
    return RecordKey(writer, incarnation, seq)


def _log() -> list[ReadRecord]:
    """Two writers' records, writer 0 then writer 1, three each."""
    records = []
    for index, key in enumerate([_key(0, 0), _key(0, 1), _key(0, 2), _key(1, 0), _key(1, 1)]):
        records.append(ReadRecord(Position(7, index // 2, index % 2), key, True))
    return records


def _history(reads: list[ReadRecord], other: list[ReadRecord] | None = None) -> History:
    acks = [Ack(record.key, record.position) for record in _log()]
    sent = {(0, 1): 2, (1, 1): 1}
    return History(acks, {"a": reads, "b": list(reads) if other is None else other}, sent)


def _rules(history: History) -> set[str]:
    return {violation.rule for violation in check(history)}


def test_clean_history_passes() -> None:
    assert check(_history(_log())) == []


def test_lost_acknowledged_record_is_flagged() -> None:
    assert _rules(_history(_log()[:-1])) == {"ack_lost"}


def test_duplicate_record_is_flagged() -> None:
    reads = [*_log(), ReadRecord(Position(8, 0, 0), _key(1, 1), True)]
    assert "duplicate" in _rules(_history(reads))


def test_writer_order_violation_is_flagged() -> None:
    reads = _log()
    swapped = [
        *reads[:3],
        ReadRecord(reads[3].position, reads[4].key, True),
        ReadRecord(reads[4].position, reads[3].key, True),
    ]
    assert "writer_order" in _rules(_history(swapped))


def test_readers_disagreeing_is_flagged() -> None:
    assert "readers_disagree" in _rules(_history(_log(), _log()[:-1]))


def test_damaged_and_unknown_records_are_flagged() -> None:
    reads = _log()
    reads[1] = ReadRecord(reads[1].position, reads[1].key, False)
    reads.append(ReadRecord(Position(9, 0, 0), _key(0, 99), True))
    assert {"read_damaged", "unknown_record"} <= _rules(_history(reads))


def test_record_at_other_position_than_acknowledged_is_flagged() -> None:
    reads = [
        ReadRecord(Position(7, 5, r.position.slot + 10 * i), r.key, True)
        for i, r in enumerate(_log())
    ]
    assert "ack_moved" in _rules(_history(reads))


def test_payload_round_trips_and_detects_damage() -> None:
    data = payload(_key(2, 41, 3))
    assert decode(data) == (_key(2, 41, 3), True)
    assert len(data) > len(b"2:3:41|")  # this key has padding to damage
    assert decode(data[:-1] + b"#") == (_key(2, 41, 3), False)
    assert decode(data[:-1]) == (_key(2, 41, 3), False)
    with pytest.raises(ValueError, match="separator"):
        decode(b"garbage")


def test_schedule_is_a_function_of_the_seed_and_bounds_faulty_bookies() -> None:
    args = {"bookies": 5, "writers": 3, "session_timeout": 4.0, "max_faulty_bookies": 2}
    first = make_schedule(11, 300.0, **args)  # type: ignore[arg-type]
    assert first == make_schedule(11, 300.0, **args)  # type: ignore[arg-type]
    assert first != make_schedule(12, 300.0, **args)  # type: ignore[arg-type]
    faulty = 0
    for step in timeline([f for f in first if f.kind.endswith("_bookie")]):
        faulty += -1 if step.heal else 1
        assert faulty <= 2
    for writer in range(3):
        down = 0
        for step in timeline([f for f in first if f.kind == "kill_writer" and f.target == writer]):
            down += -1 if step.heal else 1
            assert down <= 1, "a writer killed again while down would run twice after healing"


def test_tailing_reader_must_have_read_a_prefix_of_the_final_log() -> None:
    history = _history(_log())
    history.tail = _log()[:3]
    assert check(history) == []
    history.tail = [*_log()[:2], _log()[3]]
    assert _rules(history) == {"tail_not_prefix"}


def _replication(holding: frozenset[str], retired: frozenset[str] = frozenset()) -> Replication:
    ensemble = ("b1:3181", "b2:3181", "b3:3181")
    fragment = FragmentCopies(7, 0, 2, ensemble, holding)
    return Replication([fragment], frozenset({"b1:3181", "b2:3181", "b3:3181"}), retired)


def test_writer_epochs_must_not_go_back_in_the_log() -> None:
    history = _history(_log())
    history.epochs = {(0, 1): 4, (1, 1): 5}
    assert check(history) == []
    history.epochs = {(0, 1): 5, (1, 1): 4}
    assert _rules(history) == {"epoch_order"}


def test_a_fragment_short_of_copies_or_naming_a_retired_bookie_is_flagged() -> None:
    history = _history(_log())
    history.replication = _replication(frozenset({"b1:3181", "b2:3181", "b3:3181"}))
    assert check(history) == []
    history.replication = _replication(frozenset({"b1:3181", "b2:3181"}))
    assert _rules(history) == {"under_replicated"}
    history.replication = _replication(
        frozenset({"b1:3181", "b2:3181", "b3:3181"}), frozenset({"b3:3181"})
    )
    assert _rules(history) == {"retired_bookie_named"}


def test_records_retention_deleted_are_checked_against_the_tail() -> None:
    log = _log()
    history = _history(log[3:])  # the final readers start at ledger 7 entry 1 slot 1
    history.tail = log
    assert _rules(history) == {"ack_lost", "tail_not_prefix"}, "without a truncation: lost"
    history.truncated_through = log[3].position
    assert check(history) == []
    history.tail = [log[0], *log[2:]]  # the tail skipped a record retention then deleted
    assert _rules(history) == {"ack_lost"}


def test_a_mixed_history_reports_a_lost_a_duplicated_an_epoch_inversion_and_a_fragment() -> None:
    log = _log()
    reads = [*log[:2], *log[3:], ReadRecord(Position(8, 0, 0), log[0].key, True)]
    history = _history(reads, list(reads))
    history.epochs = {(0, 1): 6, (1, 1): 5}
    history.replication = _replication(frozenset({"b1:3181"}))
    violations = check(history)
    rules = {violation.rule for violation in violations}
    assert {"ack_lost", "duplicate", "epoch_order", "under_replicated"} <= rules, violations
    lost = next(v for v in violations if v.rule == "ack_lost")
    assert str(log[2].key) in lost.detail

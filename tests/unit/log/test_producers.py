"""The producer table: which (producer, seq) pairs a log holds, and where (pure)."""

from __future__ import annotations

import pytest

from walog.errors import SequenceError, SequenceTooOldError
from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.position import Position
from walog.log.producers import IDLE_SECONDS, ProducerTable
from walog.log.sessions import tail_to_scan


def _write(
    table: ProducerTable, producer: str, seq: int | None, at: Position, stamp: float = 1.0
) -> int:
    kind, seq, _ = table.admit(producer, seq)
    assert kind == "new"
    table.accept(producer, seq, stamp)
    table.written(producer, seq, at, stamp)
    return seq


def test_a_seq_the_log_holds_returns_its_first_position() -> None:
    table = ProducerTable()
    _write(table, "p", 5, Position(1, 0, 0))
    assert table.admit("p", 5) == ("written", 5, Position(1, 0, 0))


def test_without_a_seq_a_record_is_numbered_the_last_plus_one() -> None:
    table = ProducerTable()
    assert _write(table, "p", None, Position(1, 0, 0)) == 0
    assert _write(table, "p", None, Position(1, 0, 1)) == 1
    _write(table, "p", 10, Position(1, 0, 2))
    assert _write(table, "p", None, Position(1, 0, 3)) == 11


def test_a_gap_is_accepted_and_a_skipped_seq_is_refused() -> None:
    table = ProducerTable()
    _write(table, "p", 1, Position(1, 0, 0))
    _write(table, "p", 4, Position(1, 0, 1))  # 2 and 3 skipped
    with pytest.raises(SequenceError, match="seq 3 was skipped") as caught:
        table.admit("p", 3)
    assert not isinstance(caught.value, SequenceTooOldError)


def test_a_seq_older_than_the_window_is_refused_as_too_old() -> None:
    table = ProducerTable(window=3)
    for seq in range(5):
        _write(table, "p", seq, Position(1, seq, 0))
    assert table.admit("p", 2) == ("written", 2, Position(1, 2, 0))
    with pytest.raises(SequenceTooOldError, match="seq 1 is older"):
        table.admit("p", 1)


def test_a_seq_in_flight_is_joined_not_written_again() -> None:
    table = ProducerTable()
    table.accept("p", 0, 1.0)
    assert table.admit("p", 0) == ("pending", 0, None)
    table.written("p", 0, Position(2, 0, 0), 1.0)
    assert table.admit("p", 0) == ("written", 0, Position(2, 0, 0))


def test_a_failed_seq_stays_skipped() -> None:
    table = ProducerTable()
    _write(table, "p", 0, Position(1, 0, 0))
    table.accept("p", 1, 1.0)
    table.failed("p", 1)
    with pytest.raises(SequenceError, match="skipped"):
        table.admit("p", 1)


def test_the_table_round_trips_through_its_stored_form() -> None:
    table = ProducerTable(window=4)
    for seq in range(6):
        _write(table, "a", seq, Position(3, seq, 0))
    _write(table, "b", 9, Position(3, 9, 1))
    table.last = Position(3, 9, 1)
    again = ProducerTable.from_doc(table.to_doc(now=2.0), window=4)
    assert again.last == Position(3, 9, 1)
    assert again.admit("a", 2) == ("written", 2, Position(3, 2, 0))
    assert again.admit("a", None) == ("new", 6, None)
    with pytest.raises(SequenceTooOldError):
        again.admit("a", 1)
    assert again.admit("b", 9) == ("written", 9, Position(3, 9, 1))


def test_the_stored_table_leaves_out_producers_idle_too_long() -> None:
    table = ProducerTable()
    _write(table, "old", 0, Position(1, 0, 0))  # stamp 1.0
    doc = table.to_doc(now=1.0 + IDLE_SECONDS + 1)
    assert doc["producers"] == {}


def test_producers_beyond_the_bound_are_evicted_least_recently_used_first() -> None:
    table = ProducerTable(max_producers=2)
    _write(table, "a", 0, Position(1, 0, 0), stamp=1.0)
    _write(table, "b", 0, Position(1, 0, 1), stamp=2.0)
    _write(table, "a", 1, Position(1, 0, 2), stamp=3.0)  # a used after b
    _write(table, "c", 0, Position(1, 0, 3), stamp=4.0)
    assert "b" not in table and "a" in table and "c" in table


def test_a_producer_with_a_seq_in_flight_is_not_evicted() -> None:
    table = ProducerTable(max_producers=1)
    table.accept("a", 0, 1.0)
    _write(table, "b", 0, Position(1, 0, 0))
    assert "a" in table


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"format": 2, "producers": {}},
        {"format": 1, "last": 7, "producers": {}},
        {"format": 1, "producers": {"p": {"stamp": 1.0, "window": [["x", "1:0:0"]]}}},
        {"format": 1, "producers": {"p": {"window": []}}},
    ],
)
def test_a_stored_table_that_does_not_parse_is_refused(doc: object) -> None:
    with pytest.raises(ValueError):
        ProducerTable.from_doc(doc)


def test_a_damaged_stored_table_is_set_aside_and_the_record_still_reads() -> None:
    raw = LogMetadata(ledgers=(LedgerInfo(1),)).to_json()[:-1] + b', "producers": [1]}'
    meta = LogMetadata.from_json(raw)
    assert meta.producers is None
    assert [d.field for d in meta.damaged] == ["producers"]


def test_a_takeover_reads_the_ledgers_after_the_last_record_the_table_covers() -> None:
    closed = [LedgerInfo(i, "CLOSED", 5) for i in (3, 5, 8)]
    meta = LogMetadata(ledgers=(*closed, LedgerInfo(9)))
    assert [(i.ledger_id, first) for i, first in tail_to_scan(meta, Position(5, 2, 0))] == [
        (5, 3),
        (8, 0),
    ]
    assert [(i.ledger_id, first) for i, first in tail_to_scan(meta, None)] == [(5, 0), (8, 0)]
    # The table's ledger truncated away: every ledger after it.
    assert [i.ledger_id for i, _ in tail_to_scan(meta, Position(4, 0, 0))] == [5, 8]


def test_take_accepts_what_admit_calls_new_and_leaves_the_rest_to_it() -> None:
    table = ProducerTable()
    taken = table.take("p", None, 1.0)
    assert taken is not None and taken[1] == 0
    assert table.admit("p", 0) == ("pending", 0, None)
    assert table.take("p", 0, 1.0) is None
    taken = table.take("p", 7, 2.0)
    assert taken is not None and taken[1] == 7
    assert table.take("p", None, 3.0) is not None and table.state("p").last_seq == 8  # type: ignore[union-attr]

"""Log metadata: JSON round-trip and log name validation."""

from __future__ import annotations

import json

import pytest

from walog.log.log_metadata import LedgerInfo, LogMetadata, validate_log_name
from walog.log.position import Position


def test_log_metadata_round_trips_through_json() -> None:
    meta = LogMetadata(
        ledgers=(
            LedgerInfo(3, "CLOSED", 41, ctime=1.0, closed_at=2.0, size_bytes=100),
            LedgerInfo(9, ctime=3.0),
        ),
        epoch=4,
        pending_deletion=(1, 2),
        archived_through=Position(3, 42, 0),
        cursors={"b": Position(9, 0, 0), "a": Position(3, 1, 2)},
        truncated_through=Position(3, 0, 0),
    )
    again = LogMetadata.from_json(meta.to_json())
    assert again == meta
    assert again.ledger_ids == [3, 9]
    assert again.last_ledger_id == 9
    assert again.index_of(9) == 1 and again.index_of(4) is None


def test_unknown_log_metadata_format_is_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        LogMetadata.from_json(b'{"format": 99}')
    with pytest.raises(ValueError, match="malformed"):
        LogMetadata.from_json(b"not json")


def test_segment_of_an_open_ledger_has_no_last_entry() -> None:
    seg = LedgerInfo(7, last_entry_id=5).segment()
    assert seg.state == "OPEN" and seg.last_entry_id == -1
    assert seg.first_position == Position(7, 0, 0)
    closed = LedgerInfo(7).closed(5, 10, now=1.0).segment()
    assert closed.state == "CLOSED" and closed.last_entry_id == 5


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty"),
        ("a/b", "'/'"),
        ("..", "'..'"),
        ("a..b", "'..'"),
        (".", "'..'"),
        ("a\nb", "control"),
        ("a\x00", "control"),
        ("x" * 201, "201 characters"),
    ],
)
def test_bad_log_names_are_refused(name: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        validate_log_name(name)


@pytest.mark.parametrize("name", ["orders", "a.b-c_d", "x" * 200, "日志"])
def test_good_log_names_pass(name: str) -> None:
    assert validate_log_name(name) == name


def _stored(**fields: object) -> bytes:
    """A log record as the store holds it, with ``fields`` written as given."""
    doc: dict[str, object] = {
        "format": 1,
        "epoch": 2,
        "ledgers": [{"ledger_id": 5, "state": "CLOSED", "last_entry_id": 3, "ctime": 1.0}],
    }
    doc.update(fields)
    return json.dumps(doc).encode()


def test_a_field_that_does_not_parse_leaves_the_rest_of_the_record_readable() -> None:
    meta = LogMetadata.from_json(
        _stored(
            cursors={"billing": "garbage", "audit": "5:1:0", "late": 42},
            archived_through=42,
            truncated_through="5:0:0",
            snapshots=[{"position": "nope"}],
        )
    )
    assert meta.ledger_ids == [5] and meta.epoch == 2
    assert meta.cursors == {"audit": Position(5, 1, 0)}
    assert meta.truncated_through == Position(5, 0, 0)
    assert meta.archived_through is None and meta.snapshots == ()
    assert sorted(d.name for d in meta.damaged) == [
        "archived_through",
        "cursors['billing']",
        "cursors['late']",
        "snapshots['0']",
    ]
    assert "'garbage'" in next(d.describe() for d in meta.damaged if d.item == "billing")
    assert {d.field for d in meta.damage_holding_data} == {
        "archived_through",
        "cursors",
        "snapshots",
    }


def test_a_damaged_field_is_written_back_unchanged_until_replaced_or_repaired() -> None:
    raw = _stored(cursors={"billing": "garbage", "audit": "5:1:0"}, archived_through=42)
    meta = LogMetadata.from_json(raw)
    # Any CAS of the record (a writer's roll here) keeps what it could not read.
    again = LogMetadata.from_json(meta.replace(epoch=3).to_json())
    assert again.epoch == 3 and again.damaged == meta.damaged
    stored = json.loads(meta.to_json())
    assert stored["cursors"] == {"audit": "5:1:0", "billing": "garbage"}
    assert stored["archived_through"] == 42
    # A valid value replaces the damaged one; a repaired record has none.
    fixed = meta.replace(archived_through=Position(5, 4, 0), cursors={})
    assert json.loads(fixed.to_json())["archived_through"] == "5:4:0"
    assert LogMetadata.from_json(meta.replace(damaged=()).to_json()).damaged == ()


def test_a_record_whose_ledger_list_does_not_parse_names_the_field() -> None:
    with pytest.raises(ValueError, match="'ledgers'"):
        LogMetadata.from_json(_stored(ledgers=[{"ledger": 5}]))
    with pytest.raises(ValueError, match="'epoch'"):
        LogMetadata.from_json(_stored(epoch="two"))


def test_marks_are_shown_at_positions_a_record_can_hold() -> None:
    meta = LogMetadata(
        ledgers=(
            LedgerInfo(56, "CLOSED", 9, ctime=1.0),
            LedgerInfo(60, "CLOSED", 4, ctime=1.0),
            LedgerInfo(61, ctime=1.0),
        )
    )
    # One past ledger 56's last entry: the next record is the first of ledger 60.
    assert meta.existing_at_or_after(Position(56, 10, 0)) == Position(60, 0, 0)
    assert meta.existing_at_or_after(Position(55, 3, 0)) == Position(56, 0, 0)
    assert meta.existing_at_or_after(Position(56, 9, 1)) == Position(56, 9, 1)
    assert meta.existing_at_or_after(Position(61, 7, 0)) == Position(61, 7, 0)

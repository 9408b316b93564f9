"""Log metadata: JSON round-trip and log name validation."""

from __future__ import annotations

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

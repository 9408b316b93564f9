"""Positions: ordering like the log, hashing, text round-trip, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walog.log.position import (
    Position,
    ledger_end,
    ledger_start,
    position_argument,
    unchecked_position,
)

naturals = st.integers(min_value=0, max_value=2**63 - 1)


@given(naturals, naturals, naturals)
def test_position_text_round_trips(ledger: int, entry: int, slot: int) -> None:
    pos = Position(ledger, entry, slot)
    assert str(pos) == f"{ledger}:{entry}:{slot}"
    assert Position.parse(str(pos)) == pos
    assert hash(Position.parse(str(pos))) == hash(pos)


@given(st.tuples(naturals, naturals, naturals), st.tuples(naturals, naturals, naturals))
def test_positions_order_like_ledger_then_entry_then_slot(
    a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    assert (Position(*a) < Position(*b)) == (a < b)


@pytest.mark.parametrize(
    "text", ["", "1:2", "1:2:3:4", "a:b:c", "-1:0:0", "1:2:x", "1::3", "\uff11:2:3", " : : "]
)
def test_parse_rejects_bad_text(text: str) -> None:
    with pytest.raises(ValueError, match="position"):
        Position.parse(text)


@given(naturals, naturals, naturals)
def test_unchecked_position_equals_the_checked_one(ledger: int, entry: int, slot: int) -> None:
    fast, checked = unchecked_position(ledger, entry, slot), Position(ledger, entry, slot)
    assert type(fast) is Position
    assert fast == checked and hash(fast) == hash(checked) and str(fast) == str(checked)
    assert not fast < checked and not checked < fast
    with pytest.raises(AttributeError):
        fast.slot = 0  # type: ignore[misc]  # frozen like any other position


def test_non_int_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="ledger_id"):
        Position(1.0, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ledger_id"):
        Position(-(2**70), 0, 0)


def test_negative_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="entry_id"):
        Position(1, -1, 0)
    with pytest.raises(ValueError, match="slot"):
        Position(1, 0, True)


def test_ledger_end_is_after_every_record_of_the_ledger_and_before_the_next() -> None:
    end = ledger_end(5, 9)
    assert Position(5, 9, 10_000) < end
    assert end < ledger_start(6)
    assert ledger_end(5, -1) == ledger_start(5)


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (42, TypeError, "cursor_at must be a walog.Position or text 'LEDGER:ENTRY:SLOT', got int"),
        (None, TypeError, "got NoneType"),
        ((1, 2, 3), TypeError, "got tuple"),
        (b"1:2:3", TypeError, "got bytes"),
        ("garbage", ValueError, "cursor_at: bad position 'garbage'"),
        ("1:2", ValueError, "cursor_at: bad position '1:2'"),
        ("1:-2:0", ValueError, "cursor_at: bad position"),
    ],
)
def test_a_position_argument_is_a_position_or_strict_text(
    value: object, error: type[Exception], words: str
) -> None:
    with pytest.raises(error) as caught:
        position_argument(value, "cursor_at")
    assert words in str(caught.value)
    assert position_argument("7:3:1", "cursor_at") == Position(7, 3, 1)
    assert position_argument(Position(7, 3, 1), "cursor_at") == Position(7, 3, 1)

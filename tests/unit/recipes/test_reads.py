"""The rules of state machine reads (walog/recipes/reads.py)."""

from __future__ import annotations

import pytest

from walog.log.position import Position
from walog.recipes.reads import check_consistency, reached


def test_a_read_waits_until_every_record_before_the_barrier_is_applied() -> None:
    barrier = Position(4, 2, 3)  # just after entry 2's three records
    assert not reached(Position(4, 2, 2), barrier)  # entry 2's last record not applied
    assert reached(Position(4, 2, 3), barrier)  # a leader that applied it
    assert reached(Position(4, 3, 0), barrier)  # a standby's reader past the entry
    assert not reached(None, barrier)


def test_a_node_that_applied_nothing_has_reached_the_barrier_of_an_empty_log() -> None:
    assert reached(None, Position(0, 0, 0))


def test_an_unknown_consistency_is_refused_naming_the_choices() -> None:
    assert check_consistency("stale") == "stale"
    with pytest.raises(ValueError, match="'linearizable', 'stale'"):
        check_consistency("strong")

"""The history checker finds what it must: a gap, a duplicate, a reorder, a divergence, a
lost acknowledged command."""

from __future__ import annotations

import json

import pytest

from tests.integration.recipes.history import check_histories
from walog.log.position import Position


def rec(i: int) -> str:
    return json.dumps({"op": "put", "k": f"k{i}", "v": f"v{i}"})


def line(i: int, record: str | None = None) -> str:
    return f"1:{i}:0 {record or rec(i)}"


ACKED = {f"k{i}": Position(1, i, 0) for i in range(4)}
GOOD = ["started", *(line(i) for i in range(5))]


def test_identical_histories_and_a_restore_pass() -> None:
    restarted = ["started", line(0), "started", "restored 1:2:0", line(2), line(3)]
    log = check_histories({"a": GOOD, "b": GOOD[:3], "c": restarted}, ACKED)
    assert [p.entry_id for p, _ in log] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("history", "message"),
    [
        (["started", line(0), line(2), line(3)], "applied 3 records where the log has 4"),
        (["started", line(0), line(1), line(1), line(2)], "applied 4 records"),
        (["started", line(1), line(0)], "first difference"),
        (["started", line(0), line(1, rec(9))], "another"),
        (["started", "restored 1:1:0", line(2)], "applied 1 records where the log has 2"),
    ],
)
def test_a_broken_history_is_named(history: list[str], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_histories({"a": GOOD, "b": history}, ACKED)


def test_an_acknowledged_command_nobody_applied_is_lost() -> None:
    with pytest.raises(AssertionError, match="acknowledged k7"):
        check_histories({"a": GOOD}, {**ACKED, "k7": Position(1, 7, 0)})

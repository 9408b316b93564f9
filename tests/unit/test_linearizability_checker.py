"""The register linearizability checker (tests/linearizability.py) accepts linearizable
histories and finds the non-linearizable ones."""

from __future__ import annotations

import pytest

from tests.linearizability import Op, check


def w(value: str, invoke: float, response: float | None, who: str = "c") -> Op:
    return Op("write", value, invoke, response, who)


def r(value: str | None, invoke: float, response: float, who: str = "c") -> Op:
    return Op("read", value, invoke, response, who)


def test_sequential_writes_and_reads_are_linearizable() -> None:
    assert check([w("a", 0, 1), r("a", 2, 3), w("b", 4, 5), r("b", 6, 7)]) is None


def test_a_read_before_any_write_returns_the_initial_value() -> None:
    assert check([r(None, 0, 1), w("a", 2, 3)]) is None
    assert check([r("a", 0, 1), w("a", 2, 3)]) is not None


def test_a_read_concurrent_with_a_write_may_return_either_value() -> None:
    base = [w("a", 0, 1), w("b", 2, 6)]
    assert check([*base, r("a", 3, 4)]) is None
    assert check([*base, r("b", 3, 4)]) is None


def test_a_stale_read_after_a_completed_write_is_not_linearizable() -> None:
    verdict = check([w("a", 0, 1), w("b", 2, 3), r("a", 4, 5, "standby")])
    assert verdict is not None
    assert "standby read('a')" in verdict


def test_two_reads_may_not_see_a_write_and_then_not_see_it() -> None:
    # b is concurrent with both reads, but once one read saw b, a later read must too.
    history = [w("a", 0, 1), w("b", 2, 10), r("b", 3, 4), r("a", 5, 6)]
    assert check(history) is not None


def test_a_write_of_unknown_outcome_may_take_effect_late_or_never() -> None:
    lost = w("b", 2, None)
    assert check([w("a", 0, 1), lost, r("a", 3, 4), r("b", 5, 6)]) is None
    assert check([w("a", 0, 1), lost, r("a", 3, 4), r("a", 50, 51)]) is None
    # ... but not before it was invoked.
    assert check([w("a", 0, 1), r("b", 1.5, 1.8), w("b", 2, None)]) is not None


def test_a_history_of_many_concurrent_operations_is_searched_without_blowing_up() -> None:
    history = []
    for i in range(40):
        history.append(w(f"v{i}", i, i + 3.5, f"w{i % 3}"))
        history.append(r(f"v{i}", i + 3, i + 3.2, f"r{i % 4}"))
    assert check(history) is None
    history.append(r("v0", 100, 101, "late"))
    assert check(history) is not None


def test_a_read_without_an_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="observed nothing"):
        check([Op("read", "a", 0, None)])


def test_a_long_mostly_sequential_history_is_checked_quickly() -> None:
    history = []
    t = 0.0
    for i in range(3000):
        history.append(w(f"v{i}", t, t + 1.0, "writer"))
        history.append(r(f"v{i}", t + 1.5, t + 1.7, "reader"))
        history.append(r(f"v{i}", t + 1.6, t + 2.5, "other"))
        t += 2.0
    history.append(w("lost", 10.0, None, "writer"))
    assert check(history) is None

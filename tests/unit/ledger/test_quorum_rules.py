"""The pure rules of seed 000 (write quorums, ack/coverage quorums) and seed 004 (LAC of
relaxed-durability ledgers, bookies that restart)."""

from __future__ import annotations

import pytest

from walog.ledger.durability import RestartWatch, lac_from_last_add_synced
from walog.ledger.quorum import (
    Answer,
    QuorumCoverage,
    coverage_threshold,
    entry_absent,
    write_quorums,
    write_set,
)


def test_write_quorum_table_of_seed_000_for_e4_qw3() -> None:
    bookies = ["B1", "B2", "B3", "B4"]
    table = {e: [bookies[i] for i in write_set(e, 4, 3)] for e in range(6)}
    assert table == {
        0: ["B1", "B2", "B3"],
        1: ["B2", "B3", "B4"],
        2: ["B3", "B4", "B1"],
        3: ["B4", "B1", "B2"],
        4: ["B1", "B2", "B3"],
        5: ["B2", "B3", "B4"],
    }


def test_there_are_e_distinct_write_quorums_and_one_when_qw_equals_e() -> None:
    assert len(write_quorums(4, 3)) == 4
    assert write_quorums(3, 3) == [[0, 1, 2]]


def test_coverage_needs_qw_minus_qa_plus_one_in_every_write_quorum() -> None:
    # E=4, Qw=3, Qa=2: write quorums {0,1,2} {1,2,3} {2,3,0} {3,0,1}, two answers each.
    assert coverage_threshold(3, 2) == 2
    coverage = QuorumCoverage(4, 3, 2)
    coverage.add(0, Answer.POSITIVE)
    coverage.add(2, Answer.POSITIVE)
    coverage.add(3, Answer.UNKNOWN)  # a timeout: never counts
    assert not coverage.covered()  # {1, 2, 3} holds one answer
    coverage.add(1, Answer.POSITIVE)
    assert coverage.covered()


def test_coverage_becomes_impossible_when_too_many_explicit_negatives() -> None:
    coverage = QuorumCoverage(3, 3, 2)
    coverage.add(0, Answer.NEGATIVE)
    assert not coverage.impossible()
    coverage.add(1, Answer.NEGATIVE)
    assert coverage.impossible()


def test_unknown_answers_never_make_an_entry_absent() -> None:
    assert not entry_absent([Answer.UNKNOWN] * 3, 3, 2)
    assert not entry_absent([Answer.POSITIVE, Answer.UNKNOWN, Answer.UNKNOWN], 3, 2)
    assert entry_absent([Answer.POSITIVE, Answer.POSITIVE, Answer.UNKNOWN], 3, 2)


@pytest.mark.parametrize(("ack_quorum", "lac"), [(1, 3), (2, 2), (3, 1)])
def test_lac_rule_of_seed_004_table(ack_quorum: int, lac: int) -> None:
    # Ensemble A, B, C with LastAddSynced 1, 2, 3 (seed 004's example), any order.
    assert lac_from_last_add_synced([3, 1, 2], 3, ack_quorum) == lac


def test_lac_rule_needs_every_bookie_of_the_write_quorum() -> None:
    with pytest.raises(ValueError, match="LastAddSynced"):
        lac_from_last_add_synced([1, 2], 3, 2)


def test_a_restart_may_have_lost_what_the_bookie_acknowledged_above_what_it_synced() -> None:
    watch = RestartWatch()
    assert watch.answer(7, -1) is None  # the first answer names the incarnation
    watch.acknowledged(9)
    assert watch.answer(7, 3) is None  # the same incarnation: nothing to learn
    assert list(watch.answer(8, 3) or ()) == [4, 5, 6, 7, 8, 9]
    assert watch.answer(8, 3) is None  # the new incarnation is the known one now


def test_a_restart_that_kept_every_acknowledged_entry_synced_loses_nothing() -> None:
    watch = RestartWatch()
    watch.answer(7, -1)
    watch.acknowledged(9)
    assert watch.answer(8, 9) == range(10, 10)  # a restart, and nothing lost


def test_an_answer_that_names_no_incarnation_never_looks_like_a_restart() -> None:
    watch = RestartWatch()
    watch.answer(7, -1)
    watch.acknowledged(9)
    assert watch.answer(0, -1) is None  # an older bookie does not say
    assert watch.incarnation == 7

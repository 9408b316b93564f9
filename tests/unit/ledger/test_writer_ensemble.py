"""Placement, replacement and fragment changes (seed 000, "Ensembles")."""

from __future__ import annotations

import random

import pytest

from walog.errors import NotEnoughBookiesError
from walog.ledger.ensemble import (
    Placement,
    quorum_possible,
    replace_in_ensemble,
    with_new_fragment,
)

BOOKIES = [f"10.0.0.{i}:3181" for i in range(1, 7)]


def test_ensemble_has_distinct_available_bookies() -> None:
    ensemble = Placement(random.Random(1)).choose_ensemble(BOOKIES, 4)
    assert len(ensemble) == 4
    assert len(set(ensemble)) == 4
    assert set(ensemble) <= set(BOOKIES)


def test_not_enough_bookies_error_names_how_many_and_which() -> None:
    with pytest.raises(NotEnoughBookiesError) as info:
        Placement().choose_ensemble(["127.0.0.1:3182", "127.0.0.1:3181"], 3)
    assert str(info.value) == (
        "ensemble_size=3 but only 2 bookies are available (127.0.0.1:3181, 127.0.0.1:3182)"
    )
    with pytest.raises(NotEnoughBookiesError, match=r"only 0 bookies are available \(none\)"):
        Placement().choose_ensemble([], 1)


def test_placement_prefers_least_used_bookies() -> None:
    placement = Placement(random.Random(7))
    first = placement.choose_ensemble(BOOKIES, 3)
    second = placement.choose_ensemble(BOOKIES, 3)
    assert set(first).isdisjoint(second)  # the three unused bookies are taken next
    assert all(placement.usage[b] == 1 for b in BOOKIES)


def test_placement_spreads_ensembles_over_all_bookies() -> None:
    placement = Placement(random.Random(3))
    for _ in range(40):
        placement.choose_ensemble(BOOKIES, 3)
    assert all(placement.usage[b] == 20 for b in BOOKIES)


def test_placement_is_a_random_sample() -> None:
    seen = {tuple(Placement(random.Random(seed)).choose_ensemble(BOOKIES, 3)) for seed in range(30)}
    assert len(seen) > 5


def test_replacement_is_outside_the_ensemble_and_the_excluded() -> None:
    ensemble = BOOKIES[:3]
    chosen = Placement(random.Random(2)).choose_replacements(
        ensemble, {1}, BOOKIES, excluded={BOOKIES[3], BOOKIES[4]}
    )
    assert chosen == {1: BOOKIES[5]}


def test_replacements_cover_only_as_many_indexes_as_there_are_candidates() -> None:
    chosen = Placement().choose_replacements(BOOKIES[:3], {0, 2}, BOOKIES[:4])
    assert len(chosen) == 1
    assert set(chosen.values()) == {BOOKIES[3]}
    assert Placement().choose_replacements(BOOKIES[:3], {0}, BOOKIES[:3]) == {}


def test_replace_in_ensemble_keeps_other_positions() -> None:
    assert replace_in_ensemble(("a", "b", "c"), {1: "d"}) == ("a", "d", "c")


def test_new_fragment_starts_at_first_entry_not_completed() -> None:
    fragments = ((0, ("b1", "b2", "b3")),)
    changed = with_new_fragment(fragments, 12, ("b4", "b2", "b3"))
    # Seed 000's example: a second ensemble from entry 12, differing in its first bookie.
    assert changed == ((0, ("b1", "b2", "b3")), (12, ("b4", "b2", "b3")))


def test_change_at_the_same_first_entry_replaces_that_fragment() -> None:
    fragments = ((0, ("b1", "b2", "b3")), (12, ("b4", "b2", "b3")))
    changed = with_new_fragment(fragments, 12, ("b4", "b5", "b3"))
    assert changed == ((0, ("b1", "b2", "b3")), (12, ("b4", "b5", "b3")))
    assert with_new_fragment(fragments, 0, ("x", "y", "z")) == ((0, ("x", "y", "z")),)


def test_quorum_still_possible_while_each_write_quorum_keeps_qa_bookies() -> None:
    assert quorum_possible(3, 3, 2, {0})
    assert not quorum_possible(3, 3, 2, {0, 1})
    assert quorum_possible(4, 3, 2, {0})
    # Write quorum (3, 0, 1) would keep only bookie 3.
    assert not quorum_possible(4, 3, 2, {0, 1})
    assert not quorum_possible(4, 3, 2, {0, 2})
    assert quorum_possible(4, 2, 1, {0, 2})

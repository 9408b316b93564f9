"""Placement policies: each write quorum on min(Qw, racks) racks, ensembles spread evenly."""

from __future__ import annotations

import collections
import logging
import random

import pytest

from walog.errors import NotEnoughBookiesError
from walog.ledger.placement import (
    RackAwarePlacement,
    RandomPlacement,
    arrange_racks,
    placement_policy,
    quorum_shortfall,
)
from walog.ledger.quorum import write_quorums
from walog.metadata.layout import DEFAULT_RACK, check_rack_name


def _cluster(per_rack: dict[str, int]) -> dict[str, str]:
    racks = {}
    port = 3181
    for rack, count in per_rack.items():
        for _ in range(count):
            racks[f"10.0.0.1:{port}"] = rack
            port += 1
    return racks


SIX_ON_THREE = _cluster({"r1": 2, "r2": 2, "r3": 2})


def _quorum_racks(ensemble: list[str], qw: int, racks: dict[str, str]) -> list[set[str]]:
    return [{racks[ensemble[i]] for i in q} for q in write_quorums(len(ensemble), qw)]


@pytest.mark.parametrize(("e", "qw"), [(3, 3), (3, 2), (6, 3), (4, 2), (6, 2), (5, 2)])
def test_each_write_quorum_spans_min_of_qw_and_racks(e: int, qw: int) -> None:
    for seed in range(50):
        placement = RackAwarePlacement(random.Random(seed))
        ensemble = placement.choose_ensemble(sorted(SIX_ON_THREE), e, qw, SIX_ON_THREE)
        assert len(set(ensemble)) == e
        for spanned in _quorum_racks(ensemble, qw, SIX_ON_THREE):
            assert len(spanned) == min(qw, 3), (seed, ensemble)


def test_ensemble_never_holds_two_of_a_rack_while_another_rack_has_room() -> None:
    racks = _cluster({"big": 5, "small": 1, "tiny": 1})
    for seed in range(50):
        ensemble = RackAwarePlacement(random.Random(seed)).choose_ensemble(
            sorted(racks), 3, 3, racks
        )
        assert sorted(racks[b] for b in ensemble) == ["big", "small", "tiny"]
    # Five slots over these racks: the small racks are used up first, the rest is "big".
    ensemble = RackAwarePlacement(random.Random(1)).choose_ensemble(sorted(racks), 5, 2, racks)
    counts = collections.Counter(racks[b] for b in ensemble)
    assert counts == {"big": 3, "small": 1, "tiny": 1}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_racks_short_places_anyway_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    racks = _cluster({"r1": 2, "r2": 2})
    ensemble = RackAwarePlacement(random.Random(3)).choose_ensemble(sorted(racks), 3, 3, racks)
    assert {racks[b] for b in ensemble} == {"r1", "r2"}
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and warnings[0].startswith("racks short")


def test_a_cluster_without_racks_places_silently_as_the_random_policy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    racks = dict.fromkeys(SIX_ON_THREE, DEFAULT_RACK)
    for seed in range(20):
        aware = RackAwarePlacement(random.Random(seed)).choose_ensemble(sorted(racks), 3, 3, racks)
        plain = RandomPlacement(random.Random(seed)).choose_ensemble(sorted(racks), 3)
        assert aware == plain
    assert not _warnings(caplog)


def test_ensembles_of_many_ledgers_spread_over_every_bookie() -> None:
    placement = RackAwarePlacement(random.Random(5))
    for _ in range(20):
        placement.choose_ensemble(sorted(SIX_ON_THREE), 3, 3, SIX_ON_THREE)
    assert set(placement.usage.values()) == {10}


def test_too_few_bookies_is_one_clear_error() -> None:
    with pytest.raises(NotEnoughBookiesError, match="ensemble_size=7 but only 6"):
        RackAwarePlacement().choose_ensemble(sorted(SIX_ON_THREE), 7, 3, SIX_ON_THREE)


def test_replacement_takes_the_rack_missing_from_the_write_quorum() -> None:
    for seed in range(30):
        placement = RackAwarePlacement(random.Random(seed))
        ensemble = placement.choose_ensemble(sorted(SIX_ON_THREE), 3, 3, SIX_ON_THREE)
        failed = ensemble[1]
        available = {b: r for b, r in SIX_ON_THREE.items() if b != failed}
        chosen = placement.choose_replacements(
            ensemble, {1}, sorted(available), write_quorum=3, racks=available
        )
        assert SIX_ON_THREE[chosen[1]] == SIX_ON_THREE[failed]


def test_replacement_falls_back_to_a_rack_already_in_the_quorum_and_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ensemble = ["10.0.0.1:3181", "10.0.0.1:3183", "10.0.0.1:3185"]  # r1, r2, r3
    # All of r3 is gone: only r1 and r2 bookies are candidates.
    available = {b: r for b, r in SIX_ON_THREE.items() if r != "r3"}
    chosen = RackAwarePlacement(random.Random(1)).choose_replacements(
        ensemble, {2}, sorted(available), write_quorum=3, racks=available
    )
    assert chosen[2] in {"10.0.0.1:3182", "10.0.0.1:3184"}
    assert any(w.startswith("racks short") for w in _warnings(caplog))


def test_replacement_with_striping_keeps_neighbouring_quorums_on_distinct_racks() -> None:
    placement = RackAwarePlacement(random.Random(2))
    ensemble = placement.choose_ensemble(sorted(SIX_ON_THREE), 6, 2, SIX_ON_THREE)
    spare = {"10.0.0.2:3181": "r1", "10.0.0.2:3182": "r2", "10.0.0.2:3183": "r3"}
    available = {**{b: r for b, r in SIX_ON_THREE.items() if b != ensemble[3]}, **spare}
    chosen = placement.choose_replacements(
        ensemble, {3}, sorted(available), write_quorum=2, racks=available
    )
    after = [chosen.get(i, b) for i, b in enumerate(ensemble)]
    for spanned in _quorum_racks(after, 2, available):
        assert len(spanned) == 2


def test_replacement_skips_ensemble_members_and_excluded_bookies() -> None:
    ensemble = ["10.0.0.1:3181", "10.0.0.1:3183", "10.0.0.1:3185"]
    chosen = RackAwarePlacement().choose_replacements(
        ensemble, {0}, sorted(SIX_ON_THREE), excluded={"10.0.0.1:3182"}, racks=SIX_ON_THREE
    )
    assert chosen[0] not in {*ensemble, "10.0.0.1:3182"}
    assert RackAwarePlacement().choose_replacements(ensemble, {0}, ensemble) == {}


def test_arrangement_with_no_perfect_answer_leaves_the_fewest_short_quorums() -> None:
    # Five slots over three racks with Qw = 3: no cyclic order puts every window on three
    # racks (that needs the length to be a multiple of 3); the best leaves two short.
    for seed in range(20):
        sequence = arrange_racks({"a": 2, "b": 2, "c": 1}, 3, random.Random(seed))
        assert collections.Counter(sequence) == {"a": 2, "b": 2, "c": 1}
        assert len(quorum_shortfall(sequence, 3, 3)) <= 2


def test_policy_is_chosen_by_name_and_an_unknown_name_is_one_clear_error() -> None:
    assert isinstance(placement_policy(), RackAwarePlacement)
    assert isinstance(placement_policy("random"), RandomPlacement)
    with pytest.raises(ValueError, match="unknown placement policy 'zones'; choose one of"):
        placement_policy("zones")


@pytest.mark.parametrize("name", ["", "a b", "rack/1", "x" * 65, "é"])
def test_a_bad_rack_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="rack name"):
        check_rack_name(name)

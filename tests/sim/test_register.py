"""A register on the replicated state machine, read on every node while the leader is
killed, paused and cut off (tests/sim/register_scenarios.py): linearizable reads give a
linearizable history; stale reads do not, and the checker finds it."""

from __future__ import annotations

import pytest

from tests.sim.scenarios import run_schedule

DEFAULT_SEEDS = 20
SLOW_SEEDS = 1000
STALE_BUDGET = 20
"""Schedules of stale reads the checker may need to find a read that is not linearizable."""


def _failures(scenario: str, seeds: range) -> list[str]:
    failures = []
    for seed in seeds:
        outcome = run_schedule(seed, scenario)
        if not outcome.ok:
            failures.append(outcome.report(80))
    return failures


@pytest.mark.timeout(900)
def test_linearizable_reads_of_a_register_are_linearizable() -> None:
    failures = _failures("sm_register", range(DEFAULT_SEEDS))
    assert not failures, f"{len(failures)} schedule(s) failed; the first:\n{failures[0]}"


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_linearizable_reads_of_a_register_are_linearizable_over_many_schedules() -> None:
    failures = _failures("sm_register", range(DEFAULT_SEEDS, DEFAULT_SEEDS + SLOW_SEEDS))
    assert not failures, f"{len(failures)} schedule(s) failed; the first:\n{failures[0]}"


@pytest.mark.timeout(600)
def test_stale_reads_of_a_register_are_found_not_linearizable() -> None:
    for seed in range(STALE_BUDGET):
        outcome = run_schedule(seed, "sm_register_stale")
        rules = {v.rule for v in outcome.violations}
        assert rules <= {"sm_read_not_linearizable"}, outcome.report(80)
        if rules:
            return
    pytest.fail(f"no stale read broke linearizability in {STALE_BUDGET} schedules")

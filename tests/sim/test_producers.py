"""Producer sessions in the simulator (tests/sim/producer_scenarios.py): no (producer, seq)
twice in the log, and every retry answered with the seq's first position."""

from __future__ import annotations

import pytest

from tests.sim.scenarios import run_schedule

DEFAULT_SEEDS = 20
SLOW_SEEDS = 1000


def _failures(seeds: range) -> list[str]:
    return [
        outcome.report(80)
        for seed in seeds
        if not (outcome := run_schedule(seed, "log_producers")).ok
    ]


@pytest.mark.timeout(900)
def test_no_producer_seq_is_twice_in_the_log_and_every_retry_gets_its_first_position() -> None:
    failures = _failures(range(DEFAULT_SEEDS))
    assert not failures, f"{len(failures)} schedule(s) failed; the first:\n{failures[0]}"


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_no_producer_seq_is_twice_in_the_log_over_many_schedules() -> None:
    failures = _failures(range(DEFAULT_SEEDS, DEFAULT_SEEDS + SLOW_SEEDS))
    assert not failures, f"{len(failures)} schedule(s) failed; the first:\n{failures[0]}"

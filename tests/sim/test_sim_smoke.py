"""Thousands of seeded schedules over the real protocol code: no invariant may break.

Each schedule picks a scenario, quorums, bookie count, network faults and a nemesis from its
seed (tests/sim/scenarios.py) and is checked by tests/sim/invariants.py. A failure prints the
seed, the scenario and the trace; replay it with ``python -m tests.sim --replay SEED``.
"""

from __future__ import annotations

import time

import pytest

from tests.sim.scenarios import SCENARIOS, run_schedule

CHUNK = 500
CHUNKS = 2  # 1,000 schedules in the default suite
SLOW_CHUNKS = 40  # 20,000 with --slow


def check_chunk(chunk: int) -> None:
    """Run the chunk's schedules; fail with the first failures' reports and every bad seed."""
    started = time.monotonic()
    seeds = range(chunk * CHUNK, (chunk + 1) * CHUNK)
    failures = []
    for seed in seeds:
        outcome = run_schedule(seed)
        if not outcome.ok:
            failures.append(outcome)
    print(f"seeds {seeds.start}..{seeds.stop - 1}: {time.monotonic() - started:.1f}s")
    assert not failures, "\n\n".join(o.report(80) for o in failures[:3]) + (
        f"\n\nfailing seeds: {[o.seed for o in failures]}"
    )


# ~10 s of CPU per chunk; the generous limit is for heavily shared machines.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_no_invariant_breaks_in_random_schedules(chunk: int) -> None:
    check_chunk(chunk)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("chunk", range(CHUNKS, SLOW_CHUNKS))
def test_no_invariant_breaks_in_many_more_random_schedules(chunk: int) -> None:
    check_chunk(chunk)


def test_every_scenario_runs_clean_on_its_own() -> None:
    for name in sorted(SCENARIOS):
        for seed in range(10):
            outcome = run_schedule(seed, name)
            assert outcome.ok, outcome.report(80)


def test_same_seed_replays_the_same_trace() -> None:
    for seed in (1, 17, 404):
        first, second = run_schedule(seed), run_schedule(seed)
        assert first.scenario == second.scenario
        assert first.trace == second.trace, f"seed {seed} is not deterministic"
        assert len(first.trace) > 20

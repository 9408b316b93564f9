"""Thousands of seeded schedules over the real protocol code (and the bookie's real storage
engine): no invariant may break.

Each schedule picks a scenario, quorums, bookie count, network faults and a nemesis from its
seed (tests/sim/scenarios.py) and is checked by tests/sim/invariants.py. A failure prints the
seed, the scenario and the trace; replay it with ``python -m tests.sim --replay SEED``.
"""

from __future__ import annotations

import time

import pytest

from tests.sim.scenarios import SCENARIOS, run_schedule

CHUNK = 250
CHUNKS = 1  # 250 schedules over the in-memory bookie model in the default suite (the real
# engine's 1,000 below run the same scenarios)
SLOW_CHUNKS = 80  # 20,000 with --slow
ENGINE_CHUNK = 250
ENGINE_CHUNKS = 4  # 1,000 over the real storage engine, with cancellations, by default
SLOW_ENGINE_CHUNKS = 80  # 20,000 with --slow
ENGINE_SEEDS = 1_000_000
"""Engine schedules run seeds from here (apart from the model's, which start at 0)."""


def check_seeds(seeds: range, **options: bool) -> None:
    """Run the schedules of ``seeds``; fail with the first failures' reports and every bad
    seed (replay one with ``python -m tests.sim --replay SEED``, plus the same flags)."""
    started = time.monotonic()
    failures = []
    for seed in seeds:
        outcome = run_schedule(seed, **options)
        if not outcome.ok:
            failures.append(outcome)
    print(f"seeds {seeds.start}..{seeds.stop - 1} {options}: {time.monotonic() - started:.1f}s")
    assert not failures, "\n\n".join(o.report(80) for o in failures[:3]) + (
        f"\n\nfailing seeds: {[o.seed for o in failures]} ({options})"
    )


def check_chunk(chunk: int) -> None:
    """The model's schedules of one chunk."""
    check_seeds(range(chunk * CHUNK, (chunk + 1) * CHUNK))


def check_engine_chunk(chunk: int) -> None:
    """Schedules of one chunk whose bookies run the real storage engine on simulated disks
    and whose client calls are cancelled at random moments."""
    first = ENGINE_SEEDS + chunk * ENGINE_CHUNK
    check_seeds(range(first, first + ENGINE_CHUNK), engine=True, cancel=True)


# The generous limit is for heavily shared machines. The engine's chunks are in
# tests/sim/test_sim_engine_smoke.py; with several test workers, each chunk goes to
# whichever is free (tests/conftest.py ``SPREAD``).
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
        for seed in range(3):
            outcome = run_schedule(seed, name, engine=True, cancel=True)
            assert outcome.ok, outcome.report(80)


@pytest.mark.parametrize("options", [{}, {"engine": True, "cancel": True}])
def test_same_seed_replays_the_same_trace(options: dict[str, bool]) -> None:
    for seed in (1, 17, 404):
        first, second = run_schedule(seed, **options), run_schedule(seed, **options)
        assert first.scenario == second.scenario
        assert first.trace == second.trace, f"seed {seed} is not deterministic"
        assert len(first.trace) > 20

"""The seeded schedules whose bookies run the real storage engine on simulated disks and
whose client calls are cancelled at random moments (tests/sim/test_sim_smoke.py runs the
model's; a module runs on one test worker, so the two run side by side)."""

from __future__ import annotations

import pytest

from tests.sim.test_sim_smoke import ENGINE_CHUNKS, SLOW_ENGINE_CHUNKS, check_engine_chunk


@pytest.mark.timeout(900)
@pytest.mark.parametrize("chunk", range(ENGINE_CHUNKS))
def test_no_invariant_breaks_with_the_real_engine_and_cancellations(chunk: int) -> None:
    check_engine_chunk(chunk)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("chunk", range(ENGINE_CHUNKS, SLOW_ENGINE_CHUNKS))
def test_no_invariant_breaks_in_many_more_engine_schedules(chunk: int) -> None:
    check_engine_chunk(chunk)

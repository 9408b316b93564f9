"""Process chaos against real ZooKeeper and real bookie processes (see tests/chaos/harness).

The default run is a ~30 s smoke; ``--slow`` adds a long search over many seeds.
``WALOG_CHAOS_SEED`` replays a seed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.chaos.harness import ChaosConfig, run_chaos
from walog.testing import ZooKeeperServer

SEED = int(os.environ.get("WALOG_CHAOS_SEED", "0")) or int(time.time()) % 100_000


@pytest.mark.timeout(400)  # ~30 s alone; a loaded machine slows every process down
def test_acknowledged_records_survive_process_chaos(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """Writers in turns, bookies and writers killed, paused and expired: nothing acknowledged
    lost, no duplicates, each writer's order kept, two fresh readers agree."""
    result = run_chaos(ChaosConfig(seed=SEED, seconds=15.0), tmp_path, zookeeper)
    print(result.report())
    assert result.ok, result.report()
    assert result.acks > 0, f"no record was acknowledged at all:\n{result.report()}"


@pytest.mark.slow  # the simulator runs VOLATILE logs under faults in every ./test
@pytest.mark.timeout(400)
def test_acknowledged_records_of_a_volatile_log_survive_process_chaos(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """The same rules for a VOLATILE log (E = Qw = 3, Qa = 2): a killed bookie's page cache
    outlives it, and its writer stops at a bookie fault (it cannot replace bookies), so the
    writers take over, roll and recover all the more."""
    config = ChaosConfig(seed=SEED, seconds=15.0, durability="VOLATILE")
    result = run_chaos(config, tmp_path, zookeeper)
    print(result.report())
    assert result.ok, result.report()
    assert result.acks > 0, f"no record was acknowledged at all:\n{result.report()}"


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_acknowledged_records_survive_long_chaos(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """The same rules over many rounds (WALOG_CHAOS_MINUTES, default 30) with both quorum
    shapes, E3/Qw3/Qa2 and E3/Qw2/Qa2."""
    deadline = time.monotonic() + float(os.environ.get("WALOG_CHAOS_MINUTES", "30")) * 60
    seed = SEED
    while time.monotonic() < deadline:
        write_quorum = 3 if seed % 2 else 2
        config = ChaosConfig(seed=seed, seconds=120.0, write_quorum=write_quorum)
        result = run_chaos(config, tmp_path / str(seed), zookeeper)
        assert result.ok, result.report()
        seed += 1


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_chaos_checker_catches_a_planted_fencing_bug(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """With recovery reads that do not fence (a planted bug), a writer that was taken over
    keeps getting acknowledgements for records the log then drops: ``ack_lost``."""
    config = ChaosConfig(seed=SEED, seconds=20.0, mutations=("no_fence_on_recovery_reads",))
    result = run_chaos(config, tmp_path, zookeeper)
    rules = {violation.rule for violation in result.violations}
    assert "ack_lost" in rules, f"the planted bug went unnoticed:\n{result.report()}"

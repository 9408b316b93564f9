"""Mixed faults across hosts (tests/hosts/nemesis): writers with takeovers, a tailing
reader, a replicated key-value service, autorecovery, ``walog maintain`` and a
decommission, under a seeded mix of host and rack isolation, one-way cuts, ZooKeeper
leader and quorum loss, bookie SIGKILL and SIGSTOP, a full disk and a failing one. After
the heal: nothing acknowledged lost, duplicated or out of order, epochs in order, the
tail a prefix of the log, every fragment back on live bookies, the service's history
whole.

The default suite runs 60 s of faults (about 75 s in all, a new seed each run); ``--slow``
adds a run of ten minutes.
``WALOG_NEMESIS_SEED`` replays a seed (``python -m tests.hosts.nemesis`` from the shell).

Clean-up, even when the run is killed: every process runs on a host (a network
namespace) that the HostCluster removes at the end, processes and all; after a SIGKILL
the next HostCluster's start does it (namespaces carry their owner's process id), the
bookies stop by themselves (``--exit-with``) and the processes started here die with this
one (parent-death signal). The small disk is a tmpfs named after this process, unmounted
at the end, or by the next run that mounts one (tests/integration/disks.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.hosts.nemesis.run import MixedConfig, run_mixed
from walog.testing.netns import HostNetworkError, check_can_make_hosts

SEED = int(os.environ.get("WALOG_NEMESIS_SEED", "0")) or int(time.time()) % 100_000


def _run(seconds: float, work: Path) -> None:
    try:
        check_can_make_hosts()
    except HostNetworkError as exc:
        pytest.fail(f"cannot build hosts here: {exc}", pytrace=False)
    result = run_mixed(MixedConfig(seed=SEED, seconds=seconds), work)
    print(result.report())
    assert result.ok, result.report()
    assert result.totals["acknowledged"], f"nothing acknowledged:\n{result.report()}"
    assert result.totals["lost"] == 0


@pytest.mark.timeout(600)  # about 75 s alone; a loaded machine slows every process down
def test_a_minute_of_mixed_faults_loses_nothing_acknowledged_and_leaves_every_ledger_repaired(
    tmp_path: Path,
) -> None:
    _run(60.0, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_ten_minutes_of_mixed_faults_lose_nothing_acknowledged_and_leave_every_ledger_repaired(
    tmp_path: Path,
) -> None:
    _run(600.0, tmp_path)

"""The servers tests start (ZooKeeper, Prometheus) die with the process that started them,
even when it is killed with SIGKILL and runs no teardown: a killed test run leaves none of
them running, and the next run removes the data directories it left."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import DIE_WITH_PARENT, REPO, exited_within, watched
from walog.testing.tempdirs import owned_temp_dir

GONE_WITHIN = 30.0
"""Seconds a server may take to go once its owner is killed (generous: SIGKILL is at once,
but the machine may be busy)."""

_OWNERS = {
    "zookeeper": "from walog.testing import ZooKeeperServer\nserver = ZooKeeperServer().start()\n",
    "prometheus": (
        "from tests.prometheus import PrometheusServer\nserver = PrometheusServer({}).start()\n"
    ),
}
"""What the owner process runs to start each server (as ``server``)."""

_THEN = "print(server.pid, server._dir, flush=True)\nimport time\ntime.sleep(600)\n"

_PREFIXES = {"zookeeper": "walog-zk-", "prometheus": "walog-prometheus-"}
"""Their data directories' prefix (``owned_temp_dir``)."""
"""Then it prints the server's PID and data directory, and waits to be killed."""


@pytest.mark.parametrize("server", [pytest.param("zookeeper", marks=pytest.mark.zk), "prometheus"])
def test_a_test_server_dies_with_the_process_that_started_it_killed_with_sigkill(
    server: str,
) -> None:
    owner = subprocess.Popen(
        # DIE_WITH_PARENT: the owner itself never outlives a killed test run.
        [*DIE_WITH_PARENT, sys.executable, "-c", _OWNERS[server] + _THEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    data_dir: Path | None = None
    try:
        assert owner.stdout is not None and owner.stderr is not None
        line = owner.stdout.readline().split(maxsplit=1)
        if not line or not line[0].isdigit():  # e.g. Java or prometheus is missing: say which
            owner.kill()
            lines = owner.stderr.read().strip().splitlines() or [f"exit status {owner.wait()}"]
            pytest.fail(f"the owner started no {server}: {lines[-1]}", pytrace=False)
        data_dir = Path(line[1].strip())
        # Watched while the owner still holds its child: the pidfd names that server even
        # once the owner is gone (a PID alone could be reused).
        with watched(int(line[0])) as pidfd:
            assert not exited_within(pidfd, 0), f"{server} exited on its own"
            owner.send_signal(signal.SIGKILL)
            owner.wait()
            assert exited_within(pidfd, GONE_WITHIN), f"{server} outlived its killed owner"
        assert data_dir.is_dir()  # no teardown ran
        mine = owned_temp_dir(_PREFIXES[server])  # what the next server's start calls
        mine.rmdir()
        assert not data_dir.exists(), "the next run left a killed run's data directory"
    finally:
        owner.kill()
        owner.wait()
        if data_dir is not None:  # the server's, which its killed owner left behind
            shutil.rmtree(data_dir, ignore_errors=True)

"""``--exit-with PID``: a bookie shuts down cleanly once the process it names exits, so the
bookies of a harness killed with SIGKILL (``walog.testing`` names the starting process)
do not run on; a PID that names no process is refused at start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.bookies import REPO_ROOT, BookieProcess
from tests.processes import DIE_WITH_PARENT, exited_within, watched

GONE_WITHIN = 30.0
"""Seconds a bookie may take to stop once the process it watches is gone (generous: the
clean shutdown syncs and checkpoints)."""

_OWNER = """
import sys, time
from walog.testing import BookieProcess
bookie = BookieProcess(sys.argv[1], sys.argv[2]).start().wait_ready()
assert bookie.proc is not None
print(bookie.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_bookie_stops_cleanly_once_the_process_exit_with_names_is_killed(
    tmp_path: Path,
) -> None:
    sleeper = subprocess.Popen([*DIE_WITH_PARENT, "sleep", "600"])
    bookie = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=["--exit-with", str(sleeper.pid)],
        exit_with_owner=False,
    )
    try:
        bookie.start().wait_ready()
        sleeper.kill()
        sleeper.wait()
        assert bookie.wait(GONE_WITHIN) == 0
        log = bookie.log()
        assert "process named by --exit-with exited; stopping" in log
        assert "bookie unregistered" in log and "bookie stopped" in log
    finally:
        sleeper.kill()
        sleeper.wait()
        bookie.stop_quietly()


def test_bookies_of_an_owner_killed_with_sigkill_shut_down(tmp_path: Path) -> None:
    data_dir = tmp_path / "bookie"
    # DIE_WITH_PARENT: the owner itself never outlives a killed test run.
    command = [*DIE_WITH_PARENT, sys.executable, "-c", _OWNER]
    owner = subprocess.Popen(
        [*command, str(data_dir), f"sqlite:///{tmp_path}/meta.db"],
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.strip().isdigit(), f"the owner printed no bookie PID: {line!r}"
        # Watched while the owner still holds its child: the pidfd names that bookie even
        # once the owner is gone (a PID alone could be reused).
        with watched(int(line)) as pidfd:
            owner.send_signal(signal.SIGKILL)
            owner.wait()
            assert exited_within(pidfd, GONE_WITHIN), "the bookie outlived its killed owner"
        assert "bookie stopped" in data_dir.with_name("bookie.log").read_text()
    finally:
        owner.kill()
        owner.wait()


def test_exit_with_a_pid_that_names_no_process_is_refused_with_one_line(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its PID names no process now
    done = subprocess.run(
        [
            sys.executable, "-m", "bookie",
            "--data-dir", str(tmp_path / "bookie"),
            "--listen", "127.0.0.1:1",
            "--metadata", f"sqlite:///{tmp_path}/meta.db",
            "--exit-with", str(gone.pid),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"python -m bookie: error: --exit-with {gone.pid}: no such process"
    assert not (tmp_path / "bookie").exists()  # refused before anything was touched

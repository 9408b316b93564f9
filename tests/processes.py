"""Child processes of tests: ones that die with the test run (:data:`DIE_WITH_PARENT`), and
this interpreter run on a command in the repository (:func:`run_python`, :func:`python_child`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
"""The repository's root (the working directory of :func:`run_python`)."""

DIE_WITH_PARENT: tuple[str, ...] = ("setpriv", "--pdeathsig", "KILL")
"""A command prefix: the command is SIGKILLed when the thread that started it dies (Linux's
parent-death signal, ``PR_SET_PDEATHSIG``, which follows the starting thread, not its
process), so a test run killed with SIGKILL, or ended by a SIGTERM that runs no fixture
teardown, leaves no process behind. ``setpriv`` (util-linux) sets the signal and then execs
the command, so the PID is the command's own and no Python runs between fork and exec (a
``preexec_fn``, which the Python docs call unsafe in a process with threads: tests run
kazoo and event-loop threads). Only for a child started from the test's own (main) thread:
one started from a thread that ends earlier would die with that thread.
:meth:`walog.testing.netns.Host.exec_prefix` starts programs on simulated hosts the same way."""


def repo_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository first on ``PYTHONPATH`` (a child
    imports the code under test wherever it runs), and ``extra`` set."""
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, **extra)


async def python_child(script: str, *args: str) -> asyncio.subprocess.Process:
    """This interpreter running ``script`` (``-c``) with ``args``, its stdout a pipe, started
    to die with the test run (:data:`DIE_WITH_PARENT`) and to import the code under test
    (:func:`repo_env`)."""
    return await asyncio.create_subprocess_exec(
        *DIE_WITH_PARENT,
        sys.executable,
        "-c",
        script,
        *args,
        stdout=asyncio.subprocess.PIPE,
        env=repo_env(),
    )


def run_python(*args: str, timeout: float = 120.0) -> str:
    """Run this interpreter with ``args`` in the repository and return its stdout; fails the
    test, with both outputs, unless it exits with 0."""
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def exited_within(pidfd: int, seconds: float) -> bool:
    """True once the process of ``pidfd`` exits (its pidfd turns readable), False when
    ``seconds`` pass first."""
    readable, _, _ = select.select([pidfd], [], [], seconds)
    return bool(readable)


@contextlib.contextmanager
def watched(pid: int) -> Iterator[int]:
    """A pidfd of process ``pid`` (it names that process only, even once the PID is reused);
    on the way out the process is SIGKILLed if it still runs, and the pidfd closed."""
    pidfd = os.pidfd_open(pid)
    try:
        yield pidfd
    finally:
        if not exited_within(pidfd, 0):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)

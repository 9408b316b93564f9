"""Child processes of tests: ones that die with the test run (``preexec_fn=die_with_parent``),
and this interpreter run on a command in the repository (:func:`run_python`)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
"""The repository's root (the working directory of :func:`run_python`)."""


def die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process that started it dies
    (``PR_SET_PDEATHSIG``), so a test run killed with SIGKILL leaves no process behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)


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

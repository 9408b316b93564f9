"""Child processes that die with the test run: ``preexec_fn=die_with_parent``."""

from __future__ import annotations

import ctypes
import signal


def die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process that started it dies
    (``PR_SET_PDEATHSIG``), so a test run killed with SIGKILL leaves no process behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)

"""A paused test server is silent from the moment ``pause`` returns: every thread stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from walog.testing.process import freeze

BUSY_THREADS = """
import threading
def spin():
    while True:
        pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
spin()
"""


def _states(pid: int) -> list[str]:
    return [
        (task / "stat").read_text().rpartition(")")[2].split()[0]
        for task in Path(f"/proc/{pid}/task").iterdir()
    ]


def test_freeze_returns_once_every_thread_of_the_process_is_stopped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BUSY_THREADS], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        freeze(proc)
        states = _states(proc.pid)
        assert len(states) == 5 and set(states) <= {"T", "t"}, states
        proc.send_signal(signal.SIGCONT)
    finally:
        proc.kill()
        proc.wait()


def test_freeze_of_a_process_that_exited_returns() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    freeze(proc)

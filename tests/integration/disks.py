"""Small real file systems for disk-trouble tests: a size-limited tmpfs mounted by the test.

Mount points are named ``walog-disk-<pid>-*`` after the pytest process that made them. A
run killed before its clean-up leaves them mounted; the next run unmounts every such mount
whose process is gone (never one of a run still going, in another worktree for example).
Mounting needs root: a test that cannot mount fails with one line saying so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PREFIX = "walog-disk-"


def _mount_points() -> list[str]:
    with open("/proc/mounts", encoding="utf-8") as mounts:
        return [line.split()[1] for line in mounts]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_mounts() -> None:
    """Unmount (lazily) and remove the mounts left by killed test runs."""
    for point in _mount_points():
        name = Path(point).name
        if not name.startswith(PREFIX):
            continue
        pid_text = name[len(PREFIX) :].split("-", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)
            with contextlib.suppress(OSError):
                os.rmdir(point)


@contextlib.contextmanager
def small_tmpfs(size_mib: int) -> Iterator[Path]:
    """A fresh tmpfs of ``size_mib`` MiB, unmounted at the end."""
    sweep_stale_mounts()
    point = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        os.rmdir(point)
        pytest.fail(f"cannot mount a {size_mib} MiB tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(point)


def used_share(path: Path) -> float:
    """Used share of the file system holding ``path`` (as the bookie measures it)."""
    st = os.statvfs(path)
    return 1 - st.f_bavail / st.f_blocks


def fill_to(ballast_path: Path, share: float) -> None:
    """Grow the file ``ballast_path`` until its file system is ``share`` used."""
    st = os.statvfs(ballast_path.parent)
    missing = int((share - used_share(ballast_path.parent)) * st.f_blocks * st.f_frsize)
    if missing <= 0:
        return
    with open(ballast_path, "ab") as ballast:
        ballast.write(b"\0" * missing)
        ballast.flush()
        os.fsync(ballast.fileno())


def wait_until(check: Callable[[], bool], what: str, within: float = 30.0) -> None:
    """Poll ``check`` (a state that has no event to wait on) until it holds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within:g}s: {what}")
        time.sleep(0.05)


__all__ = ["fill_to", "small_tmpfs", "sweep_stale_mounts", "used_share", "wait_until"]

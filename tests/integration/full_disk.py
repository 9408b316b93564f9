"""A small tmpfs that a test fills up, for bookies whose journal disk runs out of space.

Mount points are named ``walog-fulldisk-<pid>-<n>``; :func:`sweep_stale_mounts` (run
before each mount) unmounts those of test processes that no longer exist, so a test run
killed with SIGKILL leaves nothing mounted for long.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

PREFIX = "walog-fulldisk-"
_numbers = itertools.count()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_mounts() -> None:
    """Unmount full-disk mounts left by test processes that are gone."""
    for line in Path("/proc/mounts").read_text().splitlines():
        mount_point = line.split()[1]
        name = Path(mount_point).name
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            subprocess.run(["umount", "-l", mount_point], check=False)


@contextlib.contextmanager
def small_tmpfs(parent: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` MiB mounted under ``parent``, unmounted at the end.

    Fails (one line) when this process may not mount file systems.
    """
    sweep_stale_mounts()
    mount_point = parent / f"{PREFIX}{os.getpid()}-{next(_numbers)}"
    mount_point.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path) -> int:
    """Write a file in ``directory`` until its file system is full; the bytes written."""
    written = 0
    chunk = b"\0" * (64 * 1024)
    with open(directory / "filler", "wb", buffering=0) as out:
        while True:
            try:
                written += out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return written


__all__ = ["fill", "small_tmpfs", "sweep_stale_mounts"]

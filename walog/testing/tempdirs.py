"""Temporary directories named after the process that made them, so that a later run can
remove those of a process killed before it could (SIGKILL runs no cleanup).

A directory is ``<tmp>/<prefix><pid>-<random>``; :func:`owned_temp_dir` first removes the
directories of the same prefix whose process is gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def owner_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_of(name: str, prefix: str) -> int | None:
    """The owner PID in a name made as ``<prefix><pid>-...``, or None for other names."""
    if not name.startswith(prefix):
        return None
    pid = name[len(prefix) :].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def sweep_stale_dirs(prefix: str) -> list[Path]:
    """Remove the temporary directories of ``prefix`` whose process is gone; return them."""
    swept = []
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = owner_of(path.name, prefix)
        if pid is not None and not owner_alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            swept.append(path)
    return swept


def owned_temp_dir(prefix: str) -> Path:
    """A new temporary directory ``<prefix><this pid>-<random>``, made after removing the
    stale ones of the same prefix (:func:`sweep_stale_dirs`). Removing it is the caller's."""
    sweep_stale_dirs(prefix)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


__all__ = ["owned_temp_dir", "owner_alive", "owner_of", "sweep_stale_dirs"]

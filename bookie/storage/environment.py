"""Where a bookie's storage engine does its blocking work, and on which disk.

:class:`StorageEnv` bundles what the engine (bookie/storage/engine.py) needs from its surroundings:
the file system (bookie/storage/files.py), how its index is opened, the worker threads that run
blocking steps, and the runner of the journal's writer. A bookie process uses
:data:`LOCAL_ENV`: its own disks, LMDB, real threads. The deterministic simulator
(tests/sim/engine.py) passes a simulated file system and index, and workers and a journal
writer that run on its virtual-time event loop, so the same engine code runs there.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

import lmdb

from bookie.storage.files import LOCAL_FILES, Files
from bookie.storage.journal_writer import ThreadRunner, WriterRunner
from bookie.storage.lmdb_check import check_index_file
from walog._loop_thread import name_os_thread

_T = TypeVar("_T")

_INDEX_MAP_BYTES = 1 << 40  # address space only; LMDB files grow as needed


class Workers(Protocol):
    """Threads that run blocking steps for the event loop, in submission order when there
    is one thread."""

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on a worker; its result or exception."""

    def shutdown(self) -> None:
        """Take no more work (what runs finishes)."""


class ThreadWorkers:
    """:class:`Workers` as a pool of ``threads`` named threads."""

    def __init__(self, threads: int, name: str) -> None:
        self._pool = ThreadPoolExecutor(
            threads, thread_name_prefix=name, initializer=name_os_thread
        )

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """See :meth:`Workers.run`."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def shutdown(self) -> None:
        """See :meth:`Workers.shutdown`."""
        self._pool.shutdown(wait=False)


def open_lmdb_index(directory: Path) -> lmdb.Environment:
    """Open the LMDB environment of a bookie's index, after checking its file's structure
    (LMDB follows page numbers and offsets unchecked: SIGBUS on a damaged file)."""
    check_index_file(directory / "data.mdb")
    return lmdb.open(str(directory), map_size=_INDEX_MAP_BYTES, max_dbs=4, sync=True, metasync=True)


@dataclasses.dataclass(frozen=True)
class StorageEnv:
    """The surroundings of a storage engine (see the module's description).

    Attributes:
        files: The file system of the journal and data directories.
        open_index: Opens the index's environment in a directory (LMDB's API).
        workers: Makes a pool of ``(threads, name)`` for blocking steps.
        journal_runner: Makes the journal's writer runner for ``(group_max_bytes,
            group_wait_s)``.
    """

    files: Files = LOCAL_FILES
    open_index: Callable[[Path], lmdb.Environment] = open_lmdb_index
    workers: Callable[[int, str], Workers] = ThreadWorkers
    journal_runner: Callable[[int, float], WriterRunner] = ThreadRunner


LOCAL_ENV = StorageEnv()
"""A bookie process's surroundings: its own disks, LMDB and threads."""


__all__ = ["LOCAL_ENV", "StorageEnv", "ThreadWorkers", "Workers", "open_lmdb_index"]

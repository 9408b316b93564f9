"""The journal's writer thread: group commit of the records the event loop frames out.

The event loop (:class:`bookie.storage.journal.Journal`) decides what goes where: the file, the
seed of each record's CRC, whether a record must be synced. A writer takes the records
handed over (*jobs*) in order and commits them in groups: everything queued when it looks
(consecutive jobs on one file, up to ``group_max_bytes``), one ``write`` and, when any job
of the group asks, one ``fdatasync``. The loop wakes the writer once per event-loop turn,
after the turn's records were handed over, so that they form one group. Records that arrive
while a group is written and synced form the next group, so the batching comes from the
sync itself (BookKeeper's journal flushes when its queue is empty). With
``group_wait_s > 0`` a group that syncs waits that long from its first job for more, for
disks whose syncs are very slow.

Once a group completed, the writer makes its eventfd readable; the loop then ``collect``s
the completed jobs in order, each ``(group_no, errno, synced, started, written, done)``.
After a failed write or sync every later job fails with the same errno without touching the
disk; jobs dropped by ``stop(abandon=True)`` fail with ``ECANCELED``.

Two implementations of the one interface, chosen once at import:

- ``bookie.storage._fastjournal.Writer`` (C): its thread never holds the interpreter lock, so a
  record handed over and its group's completion each cost a plain thread wake-up, not a
  wait for the lock the event loop holds;
- :class:`ThreadWriter` (pure Python, ``WALOG_PURE_PYTHON=1`` or an unbuilt extension):
  the same steps through ``os.write``, ``os.fdatasync`` and ``os.eventfd_write``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import crc32c
import structlog

from bookie.storage.fastpath import compiled_module
from bookie.storage.journal_files import FRAME
from walog._loop_thread import name_os_thread

_log = structlog.get_logger(__name__)

Completion = tuple[int, int, bool, float, float, float]
"""A completed job: group number (from 1), errno (0: done), whether the group was synced,
and when the writer started the group, its write returned and its sync returned
(``time.monotonic``)."""


class JournalWriter(Protocol):
    """The interface both writers implement (see the module's description)."""

    def submit(self, fd: int, seed: int, parts: Sequence[bytes], sync: bool, /) -> None:
        """Queue a job: the concatenation of ``parts`` as one record of ``fd`` whose CRC
        starts from ``seed`` (no parts: write nothing); ``sync``: its group is synced
        before it completes. A writer waiting for work is not woken (:meth:`wake`)."""

    def wake(self) -> None:
        """Wake the writer for the jobs submitted since it last looked."""

    def run(self) -> None:
        """The thread's body, until :meth:`stop`."""

    def fileno(self) -> int:
        """The eventfd, readable once a group completed."""

    def collect(self) -> list[Completion]:
        """The jobs completed since the last call, in submission order."""

    def stop(self, abandon: bool, /) -> None:
        """End :meth:`run` once the queue is written (``abandon``: drop what is queued)."""


class _Job:
    __slots__ = ("enqueued", "fd", "parts", "seed", "size", "sync")

    def __init__(self, fd: int, seed: int, parts: Sequence[bytes], sync: bool) -> None:
        self.fd = fd
        self.seed = seed
        self.parts = parts
        self.sync = sync
        self.size = FRAME.size + sum(len(part) for part in parts) if parts else 0
        self.enqueued = time.monotonic()


class ThreadWriter:
    """The pure-Python writer (see the module's description)."""

    def __init__(self, group_max_bytes: int, group_wait_s: float) -> None:
        self._group_max_bytes = max(group_max_bytes, 1)
        self._group_wait_s = group_wait_s
        self._cond = threading.Condition()
        self._queue: collections.deque[_Job] = collections.deque()
        self._done: list[Completion] = []
        self._stopping = False
        self._abandon = False
        self._failed = 0
        self._groups = 0
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def __del__(self) -> None:
        if self._efd >= 0:
            os.close(self._efd)
            self._efd = -1

    def submit(self, fd: int, seed: int, parts: Sequence[bytes], sync: bool, /) -> None:
        """See :meth:`JournalWriter.submit`."""
        job = _Job(fd, seed, parts, sync)
        with self._cond:
            self._queue.append(job)

    def wake(self) -> None:
        """See :meth:`JournalWriter.wake`."""
        with self._cond:
            self._cond.notify()

    def fileno(self) -> int:
        """See :meth:`JournalWriter.fileno`."""
        return self._efd

    def collect(self) -> list[Completion]:
        """See :meth:`JournalWriter.collect`."""
        with contextlib.suppress(BlockingIOError):  # nothing since the last call
            os.eventfd_read(self._efd)
        with self._cond:
            done, self._done = self._done, []
        return done

    def stop(self, abandon: bool, /) -> None:
        """See :meth:`JournalWriter.stop`."""
        with self._cond:
            self._stopping = True
            self._abandon = abandon
            self._cond.notify()

    def run(self) -> None:
        """See :meth:`JournalWriter.run`."""
        try:
            while self._step():
                pass
        except BaseException as exc:
            # A bug, not a disk error: fail loudly rather than leave the records hanging.
            _log.exception("journal writer crashed", error=repr(exc))
            with self._cond:
                self._failed = self._failed or errno.EIO
                stranded = list(self._queue)
                self._queue.clear()
            self._finish(stranded, self._failed, False, 0.0, 0.0, 0.0)
        finally:
            os.eventfd_write(self._efd, 1)

    def _step(self) -> bool:
        """One group; False once the thread should end."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if self._stopping and (self._abandon or not self._queue):
                dropped = list(self._queue)
                self._queue.clear()
                self._done.extend(_failed(dropped, errno.ECANCELED))
                return False
            group = self._take_group()
            failed = self._failed
        started = time.monotonic()
        sync = any(job.sync for job in group)
        error, synced, written, done = failed, False, started, started
        if not failed:
            error, synced, written, done = _commit(group, sync)
        if error:
            with self._cond:
                self._failed = self._failed or error
        self._finish(group, error, synced, started, written, done)
        return True

    def _take_group(self) -> list[_Job]:
        """Consecutive jobs on the first one's file up to ``group_max_bytes`` (lock held);
        with ``group_wait_s > 0`` and a job that syncs, what arrives in the wait too."""
        queue = self._queue
        first = queue.popleft()
        group, size, sync = [first], first.size, first.sync
        deadline = first.enqueued + self._group_wait_s
        while size < self._group_max_bytes:
            if queue:
                if queue[0].fd != first.fd:
                    break
                job = queue.popleft()
                group.append(job)
                size += job.size
                sync = sync or job.sync
                continue
            remaining = deadline - time.monotonic()
            if not sync or self._stopping or remaining <= 0:
                break
            self._cond.wait(remaining)
        return group

    def _finish(
        self,
        group: list[_Job],
        error: int,
        synced: bool,
        started: float,
        written: float,
        done: float,
    ) -> None:
        with self._cond:
            self._groups += 1
            result = (self._groups, error, synced, started, written, done)
            self._done.extend(result for _ in group)
        os.eventfd_write(self._efd, 1)


def _commit(group: list[_Job], sync: bool) -> tuple[int, bool, float, float]:
    """Frame and write the group (and sync it): errno (0: done), synced, written, done."""
    chunks: list[bytes] = []
    for job in group:
        if job.parts:
            crc = job.seed
            for part in job.parts:
                crc = crc32c.crc32c(part, crc)
            chunks.append(FRAME.pack(job.size - FRAME.size, crc))
            chunks.extend(job.parts)
    fd = group[0].fd
    try:
        view = memoryview(b"".join(chunks))
        while view:
            view = view[os.write(fd, view) :]
        written = done = time.monotonic()
        if sync:
            os.fdatasync(fd)
            done = time.monotonic()
    except OSError as exc:
        return exc.errno or errno.EIO, False, time.monotonic(), time.monotonic()
    return 0, sync, written, done


def _failed(jobs: list[_Job], error: int) -> list[Completion]:
    return [(0, error, False, 0.0, 0.0, 0.0) for _ in jobs]


_fastjournal = compiled_module("bookie.storage._fastjournal")


def new_writer(group_max_bytes: int, group_wait_s: float) -> JournalWriter:
    """A writer of the implementation chosen at import: the compiled one when it is built
    and pure Python was not asked for (``bookie.storage.fastpath.JOURNAL_COMPILED``)."""
    if _fastjournal is not None:
        writer: JournalWriter = _fastjournal.Writer(group_max_bytes, group_wait_s)
        return writer
    return ThreadWriter(group_max_bytes, group_wait_s)


class WriterRunner(Protocol):
    """Runs a :class:`JournalWriter` for the journal on the event loop: the journal hands
    jobs to :attr:`writer` and, once told that jobs completed, collects them there."""

    @property
    def writer(self) -> JournalWriter:
        """The writer the journal submits to and collects from."""

    def start(self, loop: asyncio.AbstractEventLoop, collect: Callable[[], None]) -> None:
        """Start writing; ``collect`` is called on ``loop`` after jobs completed."""

    async def stop(self, abandon: bool) -> None:
        """Stop the writer (see :meth:`JournalWriter.stop`) and wait until it ended."""


class ThreadRunner:
    """The writer of :func:`new_writer` in a thread of its own, its completions signalled
    through its eventfd (the runner of a bookie process)."""

    def __init__(self, group_max_bytes: int, group_wait_s: float) -> None:
        self._writer = new_writer(group_max_bytes, group_wait_s)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def writer(self) -> JournalWriter:
        """See :attr:`WriterRunner.writer`."""
        return self._writer

    def start(self, loop: asyncio.AbstractEventLoop, collect: Callable[[], None]) -> None:
        """See :meth:`WriterRunner.start`."""
        writer = self._writer
        self._loop = loop
        loop.add_reader(writer.fileno(), collect)

        def run() -> None:
            name_os_thread()
            writer.run()

        self._thread = threading.Thread(target=run, name="bookie-journal", daemon=True)
        self._thread.start()

    async def stop(self, abandon: bool) -> None:
        """See :meth:`WriterRunner.stop`."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        self._writer.stop(abandon)
        await loop.run_in_executor(None, thread.join)
        loop.remove_reader(self._writer.fileno())
        self._thread = None


__all__ = [
    "Completion",
    "JournalWriter",
    "ThreadRunner",
    "ThreadWriter",
    "WriterRunner",
    "new_writer",
]

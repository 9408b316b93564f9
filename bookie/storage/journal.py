"""The bookie journal: group commit, one fdatasync per group, recycled files.

Every change a bookie acknowledges (entry, master key, fence, explicit LAC, deletion) is a
journal record first. The files and their format are in :mod:`bookie.storage.journal_files`. Once
a checkpoint no longer needs a file, it is retired: kept for reuse (up to
``recycle_files``) or deleted. The next file is a kept one renamed and overwritten from the
start: a file of full size gains no size, so its syncs have no file metadata to write, and
the pages written are pages the system already holds. A new file has its space reserved
(``posix_fallocate``) ``RESERVE_BYTES`` at a time ahead of the writes for the same reason:
on ext4 here a sync of a write into reserved space took ~215 us against ~300 us for one that
grows the file (p50, three processes syncing at once). Replay stops at the reserved space's
zeros as at any torn tail.

:class:`Journal` runs on the event loop: it places each record (file, position, the seed of
its CRC), rolls and reserves files, and hands the record to a writer thread
(:mod:`bookie.storage.journal_writer`), which frames, writes and syncs the records in groups: what
is queued when it looks forms a group, a lone record pays one write and one sync, and
records that arrive meanwhile form the next group. Unsynced VOLATILE records are synced by
a timer within ``flush_interval_s``. Each completed group comes back to the loop as a
:class:`GroupReport`; waiters complete only after that, so no record is acknowledged before
the sync that covers it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import errno
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from bookie.storage.files import LOCAL_FILES, Files, write_all
from bookie.storage.journal_files import (
    FRAME,
    HEADER_BYTES,
    JournalMark,
    StorageIOError,
    crc_seed,
    file_header,
    has_header,
    journal_file,
    journal_files,
    recycle,
    recycled_files,
)
from bookie.storage.journal_writer import JournalWriter, ThreadRunner, WriterRunner

_log = structlog.get_logger(__name__)

RESERVE_BYTES = 4 * 1024 * 1024
"""How far ahead of its writes a journal file's space is reserved."""


@dataclasses.dataclass(frozen=True, slots=True)
class GroupReport:
    """What one group commit did, handed to the event loop before its waiters complete.

    Attributes:
        group_no: Groups are numbered from 1 in commit order.
        synced: True when an fdatasync after this group's write made every record written
            so far durable (this group's and all earlier ones).
        sync_no: Number of journal syncs done so far (this group's sync when ``synced``).
        end: Journal position just after the group.
        tags: The tags given to :meth:`Journal.append` for the group's records, in order.
        record_count: Records in the group (0 for a timer-driven sync of earlier records).
        byte_count: Framed bytes written.
        enqueued: When the group's oldest record was queued (``time.monotonic``).
        started: When the journal thread started on the group.
        written: When its write returned.
        done: When its sync returned (``written`` when it was not synced).
    """

    group_no: int
    synced: bool
    sync_no: int
    end: JournalMark
    tags: list[object]
    record_count: int
    byte_count: int
    enqueued: float = 0.0
    started: float = 0.0
    written: float = 0.0
    done: float = 0.0


GroupListener = Callable[[GroupReport, BaseException | None], None]


class _Item:
    """One record (or barrier, or timer sync) handed to the writer, until it completes."""

    __slots__ = ("close_fd", "end", "enqueued", "mark_waiter", "size", "tag", "waiter")

    def __init__(
        self,
        end: JournalMark,
        size: int,
        tag: object = None,
        waiter: asyncio.Future[GroupReport] | None = None,
    ) -> None:
        self.end = end  # the journal position just after the record
        self.size = size  # framed bytes (0: no record, nothing written)
        self.tag = tag
        self.waiter = waiter
        self.enqueued = time.monotonic()
        #: A barrier's waiter, completed with ``end``: every record queued before the
        #: barrier lies before it (not the end of its group: later records may share it).
        self.mark_waiter: asyncio.Future[JournalMark] | None = None
        #: The file this sync finishes (a roll): closed once the sync is done.
        self.close_fd = -1


class Journal:
    """The journal of one bookie, on its event loop.

    Use :meth:`start` on the event loop that awaits the records, :meth:`append` (or
    :meth:`barrier`) from that loop, and :meth:`stop` to sync and close.
    """

    def __init__(
        self,
        directory: Path,
        *,
        file_bytes: int,
        group_wait_s: float,
        group_max_bytes: int,
        flush_interval_s: float,
        recycle_files: int = 4,
        on_group: GroupListener | None = None,
        files: Files = LOCAL_FILES,
        runner: Callable[[int, float], WriterRunner] = ThreadRunner,
        blocking: Callable[[Callable[[int], None], int], Awaitable[Any]] | None = None,
    ) -> None:
        self.directory = directory
        self._files = files
        self._new_runner = runner
        # How start() opens the first file off the loop (None: the loop's default pool).
        self._blocking = blocking
        self._file_bytes = file_bytes
        self._recycle_files = recycle_files
        self._group_wait_s = group_wait_s
        self._group_max_bytes = group_max_bytes
        self._flush_interval_s = flush_interval_s
        #: Called on the event loop for every group, before the group's waiters complete.
        self.listeners: list[GroupListener] = [on_group] if on_group else []
        self._stopping = False
        self._failed: StorageIOError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: WriterRunner | None = None
        self._writer: JournalWriter | None = None
        self._in_writer: collections.deque[_Item] = collections.deque()  # submission order
        self._flush_timer: asyncio.TimerHandle | None = None
        # Records of this loop turn not handed to the busy writer yet: (fd, seed, parts, sync).
        self._held: list[tuple[int, int, Sequence[bytes], bool]] = []
        self._fd = -1
        self._file_seq = 0
        self._seed = 0
        self._offset = 0
        self._reserved = 0
        self._unsynced = False  # records handed over since the last sync was asked for
        self.groups = 0
        self.syncs = 0
        self.bytes_written = 0

    @property
    def position(self) -> JournalMark:
        """Where the next record will be written."""
        return JournalMark(self._file_seq, self._offset)

    @property
    def failed(self) -> StorageIOError | None:
        """The write or sync error that stopped the journal, if any."""
        return self._failed

    async def start(self, file_seq: int) -> None:
        """Open journal file ``file_seq`` (which must not exist yet) and start the writer;
        records are then appended from the running loop. StorageIOError if the file cannot
        be made."""
        loop = asyncio.get_running_loop()
        try:
            if self._blocking is not None:
                await self._blocking(self._open_file, file_seq)
            else:
                await loop.run_in_executor(None, self._open_file, file_seq)
        except OSError as exc:
            failure = StorageIOError(f"cannot create journal file {file_seq}: {exc}")
            failure.__cause__ = exc
            self._failed = failure
            raise failure from exc
        self._loop = loop
        runner = self._runner = self._new_runner(self._group_max_bytes, self._group_wait_s)
        self._writer = runner.writer
        runner.start(loop, self._collect)

    def append(
        self,
        parts: Sequence[bytes],
        *,
        sync: bool,
        tag: object = None,
        wait: bool = True,
    ) -> asyncio.Future[GroupReport] | None:
        """Queue one record (the concatenation of ``parts``).

        Args:
            parts: The record payload, in pieces (framed by the writer).
            sync: The record's group must be fdatasync'ed before it completes.
            tag: Reported back in :attr:`GroupReport.tags` (None: not reported).
            wait: Return a future completed with the group's report (after its sync when
                the group syncs), or failed with :class:`StorageIOError`.
        """
        if self._loop is None:
            raise RuntimeError("journal not started")
        waiter = self._loop.create_future() if wait else None
        if self._failed is not None or self._stopping:
            if waiter is not None:
                waiter.set_exception(self._failed or StorageIOError("journal is closed"))
            return waiter
        size = FRAME.size
        for part in parts:
            size += len(part)
        try:
            if self._offset >= self._file_bytes:
                self._roll()
            self._reserve(self._offset + size)
        except OSError as exc:
            self._fail_now(StorageIOError(f"journal file {self._file_seq + 1} failed: {exc}"))
            if waiter is not None:
                waiter.set_exception(self._failed or StorageIOError("journal is closed"))
            return waiter
        self._offset += size
        self._hand_over(_Item(self.position, size, tag, waiter), parts, sync)
        return waiter

    def barrier(self) -> asyncio.Future[JournalMark]:
        """A future completed once everything queued so far is written and synced, with
        the journal position just after those records: every record queued before the
        barrier lies before it, every record queued after it at or beyond it."""
        if self._loop is None:
            raise RuntimeError("journal not started")
        waiter: asyncio.Future[JournalMark] = self._loop.create_future()
        if self._failed is not None or self._stopping:
            waiter.set_exception(self._failed or StorageIOError("journal is closed"))
            return waiter
        item = _Item(self.position, 0)
        item.mark_waiter = waiter
        self._hand_over(item, (), True)
        return waiter

    async def stop(self, *, sync: bool = True) -> None:
        """Write and (when ``sync``) sync what is queued, then close the file and end the
        writer. ``sync=False`` drops queued records and skips the final sync (a crash)."""
        runner, loop = self._runner, self._loop
        if runner is None or loop is None:
            return
        if sync and self._unsynced and self._failed is None and not self._stopping:
            self._hand_over(_Item(self.position, 0), (), True)
        self._stopping = True
        if self._flush_timer is not None:
            self._flush_timer.cancel()
        if sync:
            self._release_held()  # abandoned (a crash): they never reach the file
        await runner.stop(not sync)
        self._collect()
        self._runner = None
        self._writer = None
        closed = StorageIOError("journal is closed")
        while self._in_writer:  # not completed by the writer (it never does after a crash)
            items = [self._in_writer.popleft()]
            self._complete(self._report(items, False, 0.0, 0.0, 0.0), items, closed)
        if self._fd >= 0:
            self._files.close(self._fd)
            self._fd = -1

    def delete_before(self, file_seq: int) -> int:
        """Retire journal files older than ``file_seq``: keep up to ``recycle_files`` of
        them for reuse (renamed out of the journal's view), delete the rest; returns how
        many were retired. Blocking."""
        retired = 0
        files = self._files
        kept = len(recycled_files(self.directory, files))
        for seq, path in journal_files(self.directory, files):
            if seq < file_seq and seq != self._file_seq:
                if kept < self._recycle_files and has_header(path, files):
                    recycle(path, files)
                    kept += 1
                else:
                    files.unlink(path, missing_ok=True)
                retired += 1
        return retired

    # -- placing records ------------------------------------------------------------------

    def _open_file(self, file_seq: int) -> None:
        """Start journal file ``file_seq``: a recycled file renamed, or a new one; either
        way its header first (synced with the first group)."""
        files = self._files
        path = journal_file(self.directory, file_seq)
        recycled = recycled_files(self.directory, files)
        if recycled:
            files.replace(recycled[0], path)
            fd = files.open(path, os.O_WRONLY)
        else:
            fd = files.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            self._reserved = files.size(fd)  # a reused file: all of it
            files.fsync_dir(self.directory)
            write_all(files, fd, file_header(file_seq))
        except OSError:
            files.close(fd)
            raise
        self._fd = fd
        self._file_seq = file_seq
        self._seed = crc_seed(file_seq)
        self._offset = HEADER_BYTES

    def _roll(self) -> None:
        """Continue in the next file: the current one is synced (so that a synced group
        still means everything written so far is durable) and closed after that."""
        old = _Item(self.position, 0)
        old.close_fd = self._fd
        self._hand_over(old, (), True)
        self._fd = -1
        self._open_file(self._file_seq + 1)

    def _reserve(self, end: int) -> None:
        """Reserve the file's blocks up to ``end`` and ``RESERVE_BYTES`` beyond, so that
        syncs flush data only, not the file's growing size. Best effort: a file system that
        cannot reserve (or a full disk, which the write will report) leaves the file to
        grow."""
        if end <= self._reserved:
            return
        target = end + RESERVE_BYTES
        try:
            self._files.fallocate(self._fd, self._reserved, target - self._reserved)
        except OSError as exc:
            _log.info("journal file space not reserved", error=str(exc))
            target = 1 << 62  # no more attempts in this file
        self._reserved = target

    def _hand_over(self, item: _Item, parts: Sequence[bytes], sync: bool) -> None:
        assert self._writer is not None and self._loop is not None
        fd = item.close_fd if item.close_fd >= 0 else self._fd
        if not self._in_writer:
            # An idle writer starts on the record at once: a lone add waits for nothing.
            self._writer.submit(fd, self._seed, parts, sync)
            self._writer.wake()
        else:
            # A busy one gets the turn's records together at its end, so that they form one
            # group (handed over one by one, each would be taken with the few queued by then).
            if not self._held:
                self._loop.call_soon(self._release_held)
            self._held.append((fd, self._seed, parts, sync))
        self._in_writer.append(item)
        if sync:
            self._unsynced = False
        elif not self._unsynced:
            self._unsynced = True
            if self._flush_timer is None:
                self._flush_timer = self._loop.call_later(self._flush_interval_s, self._flush_due)

    def _release_held(self) -> None:
        held, self._held = self._held, []
        writer = self._writer
        if writer is not None and held:
            for job in held:
                writer.submit(*job)
            writer.wake()

    def _flush_due(self) -> None:
        """VOLATILE records waited ``flush_interval_s`` for a sync: ask for one."""
        self._flush_timer = None
        if self._unsynced and self._failed is None and not self._stopping:
            self._hand_over(_Item(self.position, 0), (), True)

    def _fail_now(self, failure: StorageIOError) -> None:
        """A step on the loop failed (a roll): records handed over still complete, with
        whatever the writer made of them; nothing more is taken."""
        if self._failed is None:
            self._failed = failure
            _log.error("journal failed", error=str(failure), file_seq=self._file_seq)

    # -- completions ----------------------------------------------------------------------

    def _collect(self) -> None:
        """The writer signalled: complete the jobs it finished, a group at a time."""
        assert self._writer is not None
        done = self._writer.collect()
        start = 0
        while start < len(done):
            group_no, error, synced, started, written, finished = done[start]
            end = start + 1
            while end < len(done) and group_no and done[end][0] == group_no:
                end += 1
            items = [self._in_writer.popleft() for _ in range(end - start)]
            start = end
            for item in items:
                if item.close_fd >= 0:
                    self._files.close(item.close_fd)
            failure: StorageIOError | None = None
            if error:
                failure = self._failed or self._write_failure(error)
            else:
                self.groups += 1
                self.syncs += synced
            report = self._report(items, synced, started, written, finished)
            if failure is None:
                self.bytes_written += report.byte_count
            self._complete(report, items, failure)

    def _write_failure(self, error: int) -> StorageIOError:
        if error == errno.ECANCELED:
            return StorageIOError("journal is closed")
        failure = StorageIOError(f"journal file {self._file_seq} failed: {os.strerror(error)}")
        self._fail_now(failure)
        return failure

    def _report(
        self, items: list[_Item], synced: bool, started: float, written: float, done: float
    ) -> GroupReport:
        return GroupReport(
            group_no=self.groups,
            synced=synced,
            sync_no=self.syncs,
            end=items[-1].end,
            tags=[item.tag for item in items if item.tag is not None],
            record_count=sum(1 for item in items if item.size),
            byte_count=sum(item.size for item in items),
            enqueued=items[0].enqueued,
            started=started,
            written=written,
            done=done,
        )

    def _complete(
        self, report: GroupReport, items: list[_Item], error: BaseException | None
    ) -> None:
        for listener in self.listeners:
            try:
                listener(report, error)
            except Exception:
                # The waiters must complete whatever a listener does.
                _log.exception("journal group listener failed")
        for item in items:
            waiter = item.waiter
            if waiter is not None and not waiter.done():
                if error is None:
                    waiter.set_result(report)
                else:
                    waiter.set_exception(error)
            mark_waiter = item.mark_waiter
            if mark_waiter is not None and not mark_waiter.done():
                if error is None:
                    mark_waiter.set_result(item.end)
                else:
                    mark_waiter.set_exception(error)


__all__ = ["GroupListener", "GroupReport", "Journal"]

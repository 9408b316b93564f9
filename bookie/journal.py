"""The bookie journal writer: group commit, one fdatasync per group, recycled files.

Every change a bookie acknowledges (entry, master key, fence, explicit LAC, deletion) is a
journal record first. The files and their format are in :mod:`bookie.journal_files`. Once
a checkpoint no longer needs a file, it is retired: kept for reuse (up to
``recycle_files``) or deleted. The next file is a kept one renamed and overwritten from the
start: a file of full size gains no size, so its syncs have no file metadata to write, and
the pages written are pages the system already holds. A new file has its space reserved
(``posix_fallocate``) ``RESERVE_BYTES`` at a time ahead of the writes for the same reason:
on ext4 here a sync of a write into reserved space took ~215 us against ~300 us for one that
grows the file (p50, three processes syncing at once). Replay stops at the reserved space's
zeros as at any torn tail. One dedicated thread owns the open file:

- it takes everything queued (up to ``group_max_bytes``) as one group. With
  ``group_wait_s == 0`` (the default) the group is written at once: records that arrive
  while it is written and synced queue up and form the next group, so the batching comes
  from the sync itself (BookKeeper's journal flushes when its queue is empty) and a lone
  record pays one write and one sync, no timer. With ``group_wait_s > 0`` a group holding a
  record that must be synced waits up to that long (from its first record's arrival) for
  more, trading latency for fewer syncs on disks where a sync is very slow;
- it ``write()``s the group, syncs it when any record needs it (or when unsynced VOLATILE
  bytes are older than the flush interval), and hands a :class:`GroupReport` back to the
  event loop with ``loop.call_soon_threadsafe``; waiters complete only after that, so no
  record is acknowledged before the sync that covers it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import crc32c
import structlog

from bookie.journal_files import (
    FRAME,
    HEADER_BYTES,
    JournalMark,
    StorageIOError,
    crc_seed,
    file_header,
    fsync_dir,
    has_header,
    journal_file,
    journal_files,
    recycle,
    recycled_files,
)
from walog._sync import name_os_thread

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
    """What one :meth:`Journal.append` queued: one record (no parts: a barrier)."""

    __slots__ = ("end", "enqueued", "mark_waiter", "parts", "size", "sync", "tag", "waiter")

    def __init__(
        self,
        parts: Sequence[bytes],
        sync: bool,
        tag: object,
        waiter: asyncio.Future[GroupReport] | None,
    ) -> None:
        self.parts = parts
        size = FRAME.size
        for part in parts:
            size += len(part)
        self.size = size
        self.sync = sync
        self.tag = tag
        self.waiter = waiter
        self.enqueued = time.monotonic()
        #: A barrier's waiter, completed with the journal position right after the records
        #: queued before it (not the end of its group: later records may share the group).
        self.mark_waiter: asyncio.Future[JournalMark] | None = None
        self.end = JournalMark(0, 0)


class Journal:
    """The journal writer: a queue drained by one group-commit thread.

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
    ) -> None:
        self.directory = directory
        self._file_bytes = file_bytes
        self._recycle_files = recycle_files
        self._group_wait_s = group_wait_s
        self._group_max_bytes = group_max_bytes
        self._flush_interval_s = flush_interval_s
        #: Called on the event loop for every group, before the group's waiters complete.
        self.listeners: list[GroupListener] = [on_group] if on_group else []
        self._queue: collections.deque[_Item] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._abandon = False
        self._failed: StorageIOError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._done: asyncio.Future[None] | None = None
        self._fd = -1
        self._file_seq = 0
        self._seed = 0
        self._offset = 0
        self._reserved = 0
        self._unsynced_bytes = 0
        self._last_sync = time.monotonic()
        self.groups = 0
        self.syncs = 0
        self.bytes_written = 0

    @property
    def position(self) -> JournalMark:
        """Where the next record will be written (thread's view; for diagnostics)."""
        return JournalMark(self._file_seq, self._offset)

    @property
    def failed(self) -> StorageIOError | None:
        """The write or sync error that stopped the journal, if any."""
        return self._failed

    async def start(self, file_seq: int) -> None:
        """Start the thread on journal file ``file_seq`` (which must not exist yet); records
        are then appended from the running loop. StorageIOError if the file cannot be made."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._done = loop.create_future()
        ready: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(
            target=self._run, args=(file_seq, ready), name="bookie-journal", daemon=True
        )
        self._thread.start()
        await ready

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
            parts: The record payload, in pieces (framed by the thread).
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
        item = _Item(parts, sync, tag, waiter)
        with self._cond:
            self._queue.append(item)
            self._cond.notify()
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
        item = _Item((), True, None, None)
        item.mark_waiter = waiter
        with self._cond:
            self._queue.append(item)
            self._cond.notify()
        return waiter

    async def stop(self, *, sync: bool = True) -> None:
        """Write and (when ``sync``) sync what is queued, then close the file and end the
        thread. ``sync=False`` drops queued records and skips the final sync (a crash)."""
        if self._thread is None or self._done is None:
            return
        with self._cond:
            self._stopping = True
            self._abandon = not sync
            self._cond.notify()
        await self._done
        self._thread = None

    def delete_before(self, file_seq: int) -> int:
        """Retire journal files older than ``file_seq``: keep up to ``recycle_files`` of
        them for reuse (renamed out of the journal's view), delete the rest; returns how
        many were retired. Blocking."""
        retired = 0
        kept = len(recycled_files(self.directory))
        for seq, path in journal_files(self.directory):
            if seq < file_seq and seq != self._file_seq:
                if kept < self._recycle_files and has_header(path):
                    recycle(path)
                    kept += 1
                else:
                    path.unlink(missing_ok=True)
                retired += 1
        return retired

    # -- the journal thread -------------------------------------------------------------

    def _open_file(self, file_seq: int) -> None:
        """Start journal file ``file_seq``: a recycled file renamed, or a new one; either
        way its header first (synced with the first group)."""
        path = journal_file(self.directory, file_seq)
        recycled = recycled_files(self.directory)
        if recycled:
            os.rename(recycled[0], path)
            self._fd = os.open(path, os.O_WRONLY)
        else:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._reserved = os.fstat(self._fd).st_size  # a reused file: all of it
        fsync_dir(self.directory)
        header = file_header(file_seq)
        if os.write(self._fd, header) != len(header):
            raise OSError(f"short write of the header of journal file {file_seq}")
        self._file_seq = file_seq
        self._seed = crc_seed(file_seq)
        self._offset = HEADER_BYTES

    def _reserve(self, end: int) -> None:
        """Reserve the file's blocks up to ``end`` and ``RESERVE_BYTES`` beyond, so that
        syncs flush data only, not the file's growing size. Best effort: a file system that
        cannot reserve (or a full disk, which the write will report) leaves the file to
        grow."""
        if end <= self._reserved:
            return
        target = end + RESERVE_BYTES
        try:
            os.posix_fallocate(self._fd, self._reserved, target - self._reserved)
        except OSError as exc:
            _log.info("journal file space not reserved", error=str(exc))
            target = 1 << 62  # no more attempts in this file
        self._reserved = target

    def _run(self, file_seq: int, ready: asyncio.Future[None]) -> None:
        assert self._loop is not None and self._done is not None
        name_os_thread()
        try:
            self._open_file(file_seq)
        except OSError as exc:
            failure = StorageIOError(f"cannot create journal file {file_seq}: {exc}")
            failure.__cause__ = exc
            self._failed = failure
            self._loop.call_soon_threadsafe(ready.set_exception, failure)
            self._loop.call_soon_threadsafe(_resolve, self._done)
            return
        self._loop.call_soon_threadsafe(_resolve, ready)
        try:
            while self._step():
                pass
        except BaseException as exc:
            # A bug, not a disk error: fail loudly rather than leave waiters hanging.
            _log.exception("journal thread crashed")
            failure = StorageIOError(f"journal thread crashed: {exc!r}")
            failure.__cause__ = exc
            self._failed = failure
            with self._cond:
                stranded = list(self._queue)
                self._queue.clear()
            self._fail(stranded, failure)
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            assert self._loop is not None and self._done is not None
            self._loop.call_soon_threadsafe(_resolve, self._done)

    def _step(self) -> bool:
        """One group; False when the thread should end."""
        items: list[_Item] = []
        with self._cond:
            while not self._queue and not self._stopping:
                if self._unsynced_bytes == 0 or self._failed is not None:
                    self._cond.wait()
                    continue
                remaining = self._last_sync + self._flush_interval_s - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if self._stopping and (self._abandon or not self._queue):
                dropped = list(self._queue)
                self._queue.clear()
                final_sync = not self._abandon and self._failed is None
                final_sync = final_sync and self._unsynced_bytes > 0
            else:
                dropped = []
                final_sync = False
                items = self._take_group()
        if dropped or (self._stopping and not items):
            self._fail(dropped, StorageIOError("journal is closed"))
            if final_sync:
                self._commit([])
            return False
        self._commit(items)
        return True

    def _take_group(self) -> list[_Item]:
        """Take a group off the queue (lock held): everything queued, then, only with
        ``group_wait_s > 0`` and a record that must be synced, what arrives in the wait."""
        items: list[_Item] = []
        size = 0
        while self._queue and size < self._group_max_bytes:
            item = self._queue.popleft()
            items.append(item)
            size += item.size
        if not items or not any(item.sync for item in items) or self._group_wait_s <= 0:
            return items
        deadline = items[0].enqueued + self._group_wait_s
        while size < self._group_max_bytes and not self._stopping:
            if self._queue:
                item = self._queue.popleft()
                items.append(item)
                size += item.size
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._cond.wait(remaining)
        return items

    def _commit(self, items: list[_Item]) -> None:
        started = time.monotonic()
        if self._failed is not None:
            self._fail(items, self._failed)
            return
        try:
            # Roll before framing: a record's CRC is seeded with its file's number.
            rolled = self._offset >= self._file_bytes and any(item.parts for item in items)
            if rolled:
                # Rolling syncs the old file; sync the group too, so a report's ``synced``
                # keeps meaning "everything written so far is durable".
                if self._unsynced_bytes:
                    os.fdatasync(self._fd)
                    self.syncs += 1
                os.close(self._fd)
                self._fd = -1
                self._open_file(self._file_seq + 1)
            chunks: list[bytes] = []
            ends: list[int] = []  # each item's end, relative to the start of the group
            relative = 0
            for item in items:
                if item.parts:
                    crc = self._seed
                    for part in item.parts:
                        crc = crc32c.crc32c(part, crc)
                    chunks.append(FRAME.pack(item.size - FRAME.size, crc))
                    chunks.extend(item.parts)
                    relative += item.size
                ends.append(relative)
            buffer = b"".join(chunks)
            must_sync = rolled or any(item.sync for item in items) or not items
            must_sync = must_sync or (
                self._unsynced_bytes + len(buffer) > 0
                and time.monotonic() - self._last_sync >= self._flush_interval_s
            )
            for item, end in zip(items, ends, strict=True):
                item.end = JournalMark(self._file_seq, self._offset + end)
            self._reserve(self._offset + len(buffer))
            view = memoryview(buffer)
            while view:
                view = view[os.write(self._fd, view) :]
            self._offset += len(buffer)
            self._unsynced_bytes += len(buffer)
            written = done = time.monotonic()
            if must_sync:
                os.fdatasync(self._fd)
                self.syncs += 1
                self._unsynced_bytes = 0
                self._last_sync = done = time.monotonic()
        except OSError as exc:
            failure = StorageIOError(f"journal file {self._file_seq} failed: {exc}")
            failure.__cause__ = exc
            self._failed = failure
            _log.error("journal failed", error=str(exc), file_seq=self._file_seq)
            self._fail(items, failure)
            return
        self.groups += 1
        self.bytes_written += len(buffer)
        report = GroupReport(
            group_no=self.groups,
            synced=must_sync,
            sync_no=self.syncs,
            end=JournalMark(self._file_seq, self._offset),
            tags=[item.tag for item in items if item.tag is not None],
            record_count=sum(1 for item in items if item.parts),
            byte_count=len(buffer),
            enqueued=items[0].enqueued if items else started,
            started=started,
            written=written,
            done=done,
        )
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._complete, report, items, None)

    def _fail(self, items: list[_Item], error: StorageIOError) -> None:
        if not items:
            return
        assert self._loop is not None
        report = GroupReport(0, False, self.syncs, self.position, [], len(items), 0)
        self._loop.call_soon_threadsafe(self._complete, report, items, error)

    # -- back on the event loop -----------------------------------------------------------

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


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


__all__ = ["GroupListener", "GroupReport", "Journal"]

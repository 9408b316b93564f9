"""The entry log being filled, and the format of its records.

An entry log holds entries of many ledgers, appended at checkpoints and by compaction. It
starts with a 20-byte header (:data:`LOG_HEADER`: ``WALE``, format version, log id, and the
CRC32C of those 16 bytes; every later version keeps these 20 bytes and may add after them);
records follow. A header whose CRC fails is damage, not a newer version: the records still
start after it (reads go by the index's offsets anyway). Logs written before the header
existed (format version 1) start with their first record, and are read as such: their
first four bytes are a record's data length, at most 64 MiB (the largest message), never
``WALE`` (1.36 GiB read as a length). Each record is
``data_len:u32 ledger:i64 entry:i64 lac:i64 digest:u32`` (:data:`RECORD`)
followed by the data. :class:`EntryLogWriter` appends records to the log being filled,
writes and syncs them chunk by chunk, rolls to a new log at ``entry_log_file_bytes``, and
builds the index rows (one run row per run of consecutive entries of a ledger whose
records it wrote back to back, bookie/storage/index.py) and live-byte counts of what it
wrote; the caller commits those
(bookie/storage/entry_storage.py). A write that fails leaves the log's tail unknown: what
it wrote is cut off, and the log is never appended to again.

The per-entry work runs in C (bookie/storage/_fastcheckpoint.c) when the extension is built,
and in Python otherwise or with ``WALOG_PURE_PYTHON=1``: the same bytes either way.

Everything here is blocking; the storage thread runs it.
"""

from __future__ import annotations

import contextlib
import operator
import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import SupportsIndex

import crc32c
import lmdb

from bookie.storage.fastpath import CHECKPOINT_COMPILED
from bookie.storage.files import Files, write_all
from bookie.storage.index import MAX_RUN_ENTRIES, ROW_CRC, RUN_HEAD
from bookie.storage.journal_files import StorageIOError
from walog.format_versions import newer_version_message

CachedEntry = tuple[int, int, bytes]
"""An entry held in the write cache: ``(lac, digest, data)``. A plain tuple, not a named
one: the garbage collector stops tracking a tuple of ints and bytes after one pass, so a
write cache of a hundred thousand entries costs full collections nothing."""

RECORD = struct.Struct(">IqqqI")
"""An entry-log record's header: data length, ledger id, entry id, LAC, digest."""
_INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_WRITE_CHUNK_BYTES = 1024 * 1024  # entry-log writes go out, and are synced, in chunks this size
# A run row's key as the append loops pack it (ENTRY_KEY's bytes for the ids they accept).
_RUN_KEY = struct.Struct(">QQ")

#: The append loop, chosen once at import (bookie/storage/fastpath.py): True for the
#: compiled one.
_COMPILED = CHECKPOINT_COMPILED


LOG_HEADER = struct.Struct(">4sIQI")
"""An entry log's header: magic, format version, log id, CRC32C of the first three."""
_LOG_MAGIC = b"WALE"
_CHECKED = LOG_HEADER.size - 4  # the header's bytes its CRC covers
ENTRY_LOG_VERSION = 2
"""The entry-log format this bookie writes, and the newest it reads (1: no header)."""


def log_header(log_id: int) -> bytes:
    """The header entry log ``log_id`` starts with."""
    head = LOG_HEADER.pack(_LOG_MAGIC, ENTRY_LOG_VERSION, log_id, 0)[:_CHECKED]
    return head + ROW_CRC.pack(crc32c.crc32c(head))


def records_start(head: bytes, path: Path) -> int:
    """Where the first record of the entry log at ``path`` starts, given its first
    :data:`LOG_HEADER` ``.size`` bytes ``head`` (fewer for a shorter file): after the
    header, or at 0 in a log of version 1 (no header).

    Raises:
        StorageIOError: the header names a newer format version than this bookie reads.
    """
    if len(head) < LOG_HEADER.size or head[:4] != _LOG_MAGIC:
        return 0
    _, version, _, crc = LOG_HEADER.unpack_from(head)
    if crc == crc32c.crc32c(head[:_CHECKED]) and version > ENTRY_LOG_VERSION:
        raise StorageIOError(
            newer_version_message(f"entry log {path}", version, ENTRY_LOG_VERSION, "the bookie")
        )
    return LOG_HEADER.size


def check_log_versions(log_dir: Path, names: Iterable[str], files: Files) -> None:
    """Refuse to open entry logs of a newer format than this bookie reads: StorageIOError
    naming the log and both versions. A header the disk fails to read is left to the reads
    of its entries, which report it as they would any failed read."""
    for name in names:
        path = log_dir / name
        try:
            fd = files.open(path, os.O_RDONLY)
            try:
                head = files.pread(fd, LOG_HEADER.size, 0)
            finally:
                files.close(fd)
        except OSError:
            continue
        records_start(head, path)


def entry_log_path(directory: Path, log_id: int) -> Path:
    """Path of entry log ``log_id``."""
    return directory / f"{log_id:010d}.log"


class EntryLogWriter:
    """Appends records to the entry log being filled. Not thread-safe: one writer thread
    calls it.

    Args:
        log_dir: the entry-log directory.
        files: the file operations (the simulator's disk in tests/sim).
        file_bytes: a log rolls once it holds this many bytes.
        cache_written: keep the pages written in the page cache; when False they are
            dropped once synced (``StorageConfig.cache_entry_logs``).
        reserve_log_id: the id of the next entry log, taken from the index for good (no
            log is ever given an id twice, nor the name of a log that exists).
    """

    def __init__(
        self,
        log_dir: Path,
        files: Files,
        *,
        file_bytes: int,
        cache_written: bool,
        reserve_log_id: Callable[[], int],
    ) -> None:
        self._log_dir = log_dir
        self._files = files
        # A log rolls once its records fill ``file_bytes``; they start after the header, so
        # a new log always takes at least one record, however small ``file_bytes`` is.
        self._roll_offset = LOG_HEADER.size + file_bytes
        self._cache_written = cache_written
        self._reserve_log_id = reserve_log_id
        self._fd = -1
        self.log_id = -1
        """The log being filled; -1 when none is open (the next write opens one)."""
        self._offset = 0
        self._pending: list[bytes] = []

    def write(
        self,
        entries: Iterable[tuple[int, int, CachedEntry]],
        rows: dict[int, list[tuple[bytes, bytes]]],
        live: dict[int, dict[int, int]],
    ) -> int:
        """Append the entries' records and sync them; their index rows go to ``rows`` by
        ledger, their record bytes to ``live`` by log and ledger. Returns the entries
        written.

        Raises:
            StorageIOError: a write, sync or roll failed.
            TypeError, ValueError: a malformed entry.
        """
        start_log, start_offset = self.log_id, self._offset
        append = self._append_compiled if _COMPILED else self._append_python
        try:
            written = append(entries, rows, live)
            if self._fd >= 0:
                self._sync()
        except BaseException as exc:
            # The log's tail is unknown now: never append to it again. What this call wrote
            # is in no index row: cut it off, so a full disk gets that space back. Bad input
            # (TypeError, ValueError) fails the same way, and records still buffered are
            # dropped with it (they would land before the next checkpoint's).
            failed_log = self.log_id
            self._pending.clear()
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    self._files.ftruncate(self._fd, start_offset if failed_log == start_log else 0)
            self.stop_appending()
            if isinstance(exc, OSError | lmdb.Error):
                raise StorageIOError(f"entry log {failed_log} write failed: {exc}") from exc
            raise
        return written

    def close(self) -> None:
        """Close the log being filled."""
        if self._fd >= 0:
            self._files.close(self._fd)
            self._fd = -1

    def _append_python(
        self,
        entries: Iterable[tuple[int, int, CachedEntry]],
        rows: dict[int, list[tuple[bytes, bytes]]],
        live: dict[int, dict[int, int]],
    ) -> int:
        """Append the entries' records to entry logs (rolling them as they fill, writing
        and syncing chunk by chunk, the last chunk written but not synced), their index rows
        to ``rows`` by ledger and their record bytes to ``live`` by log and ledger. Returns
        the entries appended. TypeError or ValueError for a malformed entry.

        The pure-Python loop; :meth:`_append_compiled` does the same work."""
        written = 0
        current = current_log = -1
        bucket: list[tuple[bytes, bytes]] = []
        per_ledger: dict[int, int] = {}
        # The checkpoint's hot loop, one pass per entry: its record is buffered for the
        # entry log and its length added to the open run; a run's row is built when it
        # closes (another ledger, a gap, a full run, a new log, a chunk written out).
        # The log's position lives in locals here; ``self._offset`` is brought up
        # to date before anything else reads it (a roll, a flush, the end).
        pending = self._pending
        record = RECORD.pack
        limit, chunk = self._roll_offset, _WRITE_CHUNK_BYTES
        log_id, offset = self.log_id, self._offset
        flushed = offset  # the log's offset at the last write of the buffered records
        lengths: list[int] = []  # the open run's record lengths (none open when empty)
        run_first = run_offset = following = 0
        try:
            for ledger_id, entry_id, (lac, digest, data) in entries:
                if log_id < 0 or offset >= limit:  # no log open (-1 with its fd), or full
                    if lengths:
                        bucket.append(_run_row(current, run_first, log_id, run_offset, lengths))
                        lengths = []
                    self._offset = offset
                    self._roll()
                    log_id, offset = self.log_id, self._offset
                    flushed = offset
                length = RECORD.size + len(data)
                head = record(len(data), ledger_id, entry_id, lac, digest)
                if ledger_id < 0 or entry_id < 0 or length > _UINT32_MAX:
                    raise struct.error("entry out of range")
                pending.append(head)
                pending.append(data)
                if ledger_id != current or log_id != current_log:
                    if lengths:
                        bucket.append(_run_row(current, run_first, log_id, run_offset, lengths))
                        lengths = []
                    # Entries come grouped by ledger and logs roll rarely: look up the
                    # ledger's row list and live-bytes slot once per run, not per entry.
                    current, current_log = ledger_id, log_id
                    bucket = rows.setdefault(ledger_id, [])
                    per_ledger = live.setdefault(log_id, {})
                    per_ledger.setdefault(ledger_id, 0)
                elif lengths and (entry_id != following or len(lengths) >= MAX_RUN_ENTRIES):
                    bucket.append(_run_row(current, run_first, log_id, run_offset, lengths))
                    lengths = []
                if not lengths:
                    run_first, run_offset = entry_id, offset
                lengths.append(length)
                following = entry_id + 1
                per_ledger[ledger_id] += length
                written += 1
                offset += length
                if offset - flushed >= chunk:
                    bucket.append(_run_row(current, run_first, log_id, run_offset, lengths))
                    lengths = []
                    self._offset = flushed = offset
                    self._flush_pending()
                    # Synced chunk by chunk: one sync of a whole checkpoint at its end would
                    # hold the disk, and the journal syncs queued behind it, for as long as
                    # all of it takes to write (tens of ms per 10 MB here).
                    self._files.fdatasync(self._fd)
        except struct.error as exc:
            problem = _bad_entry(ledger_id, entry_id, lac, digest, data)
            if problem is None:
                raise
            raise problem from exc
        if lengths:
            bucket.append(_run_row(current, run_first, log_id, run_offset, lengths))
        self._offset = offset
        self._flush_pending()
        return written

    def _append_compiled(
        self,
        entries: Iterable[tuple[int, int, CachedEntry]],
        rows: dict[int, list[tuple[bytes, bytes]]],
        live: dict[int, dict[int, int]],
    ) -> int:
        """:meth:`_append_python` with the per-entry work compiled
        (bookie/storage/_fastcheckpoint.c): it builds the records of a chunk in one buffer
        and the index rows, and returns here to roll the log, to write and sync a full
        chunk, and at the end. The same bytes, rows, live counts and errors."""
        from bookie.storage._fastcheckpoint import DONE, ROLL, append_entries

        items = iter(entries)
        buffer = bytearray()
        held: tuple[int, int, CachedEntry] | None = None
        used = written = 0
        limit, chunk = self._roll_offset, _WRITE_CHUNK_BYTES
        log_id, offset = self.log_id, self._offset
        flushed = offset  # the log's offset at buffer[0]
        while True:
            status, held, used, offset, count = append_entries(
                items, held, buffer, used, rows, live, log_id, offset, flushed, limit, chunk
            )
            written += count
            if status == DONE:
                break
            self._offset = offset
            self._write_buffer(buffer, used)
            used = 0
            if status == ROLL:  # ``held`` starts the next log
                self._roll()
                log_id, offset = self.log_id, self._offset
            else:  # a full chunk: synced chunk by chunk, as in _append_python
                self._files.fdatasync(self._fd)
            flushed = offset
        self._offset = offset
        self._write_buffer(buffer, used)
        return written

    def _write_buffer(self, buffer: bytearray, size: int) -> None:
        """Write ``buffer[:size]`` to the current entry log (nothing when ``size`` is 0).
        The views are gone on return, so the compiled loop may resize the buffer again."""
        if not size:
            return
        with memoryview(buffer) as whole, whole[:size] as chunk:
            write_all(self._files, self._fd, chunk)

    def stop_appending(self) -> None:
        """Stop appending to the current entry log; the next write starts a new one."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                self._files.close(self._fd)
        self._fd = -1
        self.log_id = -1

    def _flush_pending(self) -> None:
        """Write the buffered records to the current entry log (one syscall per chunk)."""
        data = b"".join(self._pending)
        self._pending.clear()
        write_all(self._files, self._fd, data)

    def _sync(self) -> None:
        """fsync the current entry log; then, unless written pages stay cached
        (``StorageConfig.cache_entry_logs``), let the kernel drop them."""
        self._files.fsync(self._fd)
        if not self._cache_written:
            self._files.drop_cache(self._fd)

    def _roll(self) -> None:
        """Close the current entry log (written and synced) and open the next one."""
        if self._fd >= 0:
            self._flush_pending()
            self._sync()
            self._files.close(self._fd)
            self._fd = -1
        log_id = self._reserve_log_id()
        path = entry_log_path(self._log_dir, log_id)
        self._fd = self._files.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._files.fsync_dir(self._log_dir)
        self.log_id = log_id
        # Synced with the log's first records: a log with no index row pointing into it is
        # removed at the next start, whatever it holds.
        write_all(self._files, self._fd, log_header(log_id))
        self._offset = LOG_HEADER.size


def _run_row(
    ledger_id: int, first: int, log_id: int, offset: int, lengths: list[int]
) -> tuple[bytes, bytes]:
    """The run row of a closed run (the ids and sizes were checked entry by entry)."""
    key = _RUN_KEY.pack(ledger_id, first)
    payload = RUN_HEAD.pack(log_id, offset) + struct.pack(f">{len(lengths)}I", *lengths)
    return key, ROW_CRC.pack(crc32c.crc32c(payload, crc32c.crc32c(key))) + payload


def _bad_entry(
    ledger_id: object, entry_id: object, lac: object, digest: object, data: object
) -> Exception | None:
    """The TypeError or ValueError for an entry the append loops cannot store (what the
    compiled loop raises for it too); None when its fields are fine."""
    for name, value, low, high in (
        ("ledger id", ledger_id, 0, _INT64_MAX),
        ("entry id", entry_id, 0, _INT64_MAX),
        ("lac", lac, -_INT64_MAX - 1, _INT64_MAX),
        ("digest", digest, 0, _UINT32_MAX),
    ):
        if not isinstance(value, SupportsIndex):
            return TypeError(f"{name} must be an int, not {type(value).__name__!r}")
        if not low <= operator.index(value) <= high:
            return ValueError(f"{name} out of range [{low}, {high}]: {value!r}")
    try:
        size = memoryview(data).nbytes  # type: ignore[arg-type]
    except TypeError:
        return TypeError(f"entry data must be bytes, not {type(data).__name__!r}")
    if size > _UINT32_MAX - RECORD.size:
        return ValueError(
            f"entry data of {size} bytes: a record holds at most {_UINT32_MAX - RECORD.size}"
        )
    return None


__all__ = [
    "ENTRY_LOG_VERSION",
    "LOG_HEADER",
    "RECORD",
    "CachedEntry",
    "EntryLogWriter",
    "check_log_versions",
    "entry_log_path",
    "log_header",
    "records_start",
]

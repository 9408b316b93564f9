"""The entry log being filled, and the format of its records.

An entry log holds entries of many ledgers, appended at checkpoints and by compaction. It
starts with a 20-byte header (:data:`LOG_HEADER`: ``WALE``, format version, log id, and the
CRC32C of those 16 bytes; every later version keeps these 20 bytes and may add after them);
records follow. A header whose CRC fails is damage, not a newer version: the records still
start after it (reads go by the index's offsets anyway).

Format 3 (written now) holds batch records: a 20-byte header (:data:`BATCH`:
``body_len:u32 ledger:i64 count:u32`` and the CRC32C of those 16 bytes), then ``count``
entries of that ledger packed as a client packs them (walog/wire/packing.py: a 24-byte
header ``entry_id:i64 lac:i64 digest:u32 length:u32`` then the payload). A write-cache unit
(bookie/storage/write_cache.py), an add batch as it arrived, goes into a record as its
bytes are; consecutive units of a ledger share one record. Formats 1 (no log header) and 2
hold one record per entry, ``data_len:u32 ledger:i64 entry:i64 lac:i64 digest:u32``
(:data:`RECORD`) then the data; they are read as such (bookie/storage/record_reads.py,
bookie/storage/rebuild.py), and compaction rewrites their entries in format 3.

:class:`EntryLogWriter` appends records to the log being filled, writes and syncs them
chunk by chunk, rolls to a new log at ``entry_log_file_bytes``, and builds the index rows
(one run row per run of consecutive entries of a ledger written back to back in one record,
bookie/storage/index.py; a row points at its first entry's header) and live-byte counts of
what it wrote; the caller commits those (bookie/storage/entry_storage.py). A write that
fails leaves the log's tail unknown: what it wrote is cut off, and the log is never
appended to again.

Everything here is blocking; the storage thread runs it.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

import crc32c
import lmdb

from bookie.storage.files import Files, write_all
from bookie.storage.index import MAX_RUN_ENTRIES, ROW_CRC, RUN_HEAD
from bookie.storage.journal_files import StorageIOError
from bookie.storage.write_cache import Unit
from walog.format_versions import newer_version_message

RECORD = struct.Struct(">IqqqI")
"""A format 1 or 2 entry-log record's header: data length, ledger id, entry id, LAC,
digest."""
BATCH = struct.Struct(">IqII")
"""A format 3 batch record's header: body length, ledger id, entries, CRC32C of the first
16 bytes."""
_BATCH_CHECKED = BATCH.size - 4
_INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_UNIT_LIMIT = _UINT32_MAX - BATCH.size  # a record's body length is a u32
_WRITE_CHUNK_BYTES = 1024 * 1024  # entry-log writes go out, and are synced, in chunks this size
# A run row's key as the writer packs it (ENTRY_KEY's bytes for the ids it accepts).
_RUN_KEY = struct.Struct(">QQ")


LOG_HEADER = struct.Struct(">4sIQI")
"""An entry log's header: magic, format version, log id, CRC32C of the first three."""
_LOG_MAGIC = b"WALE"
_CHECKED = LOG_HEADER.size - 4  # the header's bytes its CRC covers
ENTRY_LOG_VERSION = 3
"""The entry-log format this bookie writes, and the newest it reads (1: no header)."""


def log_header(log_id: int) -> bytes:
    """The header entry log ``log_id`` starts with."""
    head = LOG_HEADER.pack(_LOG_MAGIC, ENTRY_LOG_VERSION, log_id, 0)[:_CHECKED]
    return head + ROW_CRC.pack(crc32c.crc32c(head))


def log_format(head: bytes, path: Path) -> int | None:
    """The format of the entry log at ``path``, given its first :data:`LOG_HEADER`
    ``.size`` bytes ``head`` (fewer for a shorter file): 1 for a log without a header, the
    header's version, or None when the header fails its CRC (damage: its records may be
    of either format).

    Raises:
        StorageIOError: the header names a newer format version than this bookie reads.
    """
    if len(head) < LOG_HEADER.size or head[:4] != _LOG_MAGIC:
        return 1
    _, version, _, crc = LOG_HEADER.unpack_from(head)
    if crc != crc32c.crc32c(head[:_CHECKED]):
        return None
    if version > ENTRY_LOG_VERSION:
        raise StorageIOError(
            newer_version_message(f"entry log {path}", version, ENTRY_LOG_VERSION, "the bookie")
        )
    return int(version)


def records_start(head: bytes, path: Path) -> int:
    """Where the first record of the entry log at ``path`` starts, given its first
    :data:`LOG_HEADER` ``.size`` bytes ``head`` (fewer for a shorter file): after the
    header, or at 0 in a log of version 1 (no header).

    Raises:
        StorageIOError: the header names a newer format version than this bookie reads.
    """
    return 0 if log_format(head, path) == 1 else LOG_HEADER.size


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
        self._pending: list[bytes | bytearray | memoryview] = []
        self._pending_bytes = 0

    def write(
        self,
        pieces: Iterable[tuple[int, Unit]],
        rows: dict[int, list[tuple[bytes, bytes]]],
        live: dict[int, dict[int, int]],
    ) -> int:
        """Append the units (each with its ledger, grouped by ledger) as batch records and
        sync them; their index rows go to ``rows`` by ledger, their bytes to ``live`` by
        log and ledger. Returns the entries written.

        Raises:
            StorageIOError: a write, sync or roll failed.
            ValueError: a ledger or entry id out of range.
        """
        start_log, start_offset = self.log_id, self._offset
        try:
            written = self._append(pieces, rows, live)
            if self._fd >= 0:
                self._sync()
        except BaseException as exc:
            # The log's tail is unknown now: never append to it again. What this call wrote
            # is in no index row: cut it off, so a full disk gets that space back. Bad input
            # (TypeError, ValueError) fails the same way, and records still buffered are
            # dropped with it (they would land before the next checkpoint's).
            failed_log = self.log_id
            self._pending.clear()
            self._pending_bytes = 0
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

    def _append(
        self,
        pieces: Iterable[tuple[int, Unit]],
        rows: dict[int, list[tuple[bytes, bytes]]],
        live: dict[int, dict[int, int]],
    ) -> int:
        """Append the units as batch records to entry logs (rolling them as they fill,
        writing and syncing chunk by chunk, the last chunk written but not synced), their
        index rows to ``rows`` by ledger and their bytes to ``live`` by log and ledger.
        Returns the entries appended.

        The work is per unit, not per entry, for units of consecutive ids: a record's
        body is the units' packed bytes as they are; a run row is cut from their start
        arrays."""
        written = 0
        record: _Record | None = None
        limit = self._roll_offset
        for ledger_id, unit in pieces:
            if record is not None and record.ledger_id != ledger_id:
                self._close_record(record, rows, live)
                record = None
            if record is None:
                _check_ledger(ledger_id)
            if unit.first < 0 or unit.nbytes > _UNIT_LIMIT:
                raise ValueError(
                    f"entries {unit.first}..{unit.last} ({unit.nbytes} bytes): an entry log "
                    f"holds ids from 0 and at most {_UNIT_LIMIT} bytes a record"
                )
            begin, count = 0, len(unit.ids)
            while begin < count:
                if self.log_id < 0 or self._offset + (record.size if record else 0) >= limit:
                    if record is not None:
                        self._close_record(record, rows, live)
                        record = None
                    self._roll()
                if record is None:
                    record = _Record(ledger_id, self._offset)
                if begin == 0 and self._offset + record.size + unit.nbytes <= limit:
                    end = count  # the whole unit fits: the common case
                else:  # the entries that start before the log is full go into this log
                    room = limit - self._offset - record.size
                    starts = unit.starts
                    at = bisect.bisect_left(starts, starts[begin] + room, begin, count)
                    end = max(at, begin + 1)
                record.take(unit, begin, end)
                written += end - begin
                begin = end
                if record.size >= _WRITE_CHUNK_BYTES:
                    self._close_record(record, rows, live)
                    record = None
                if self._pending_bytes >= _WRITE_CHUNK_BYTES:
                    self._flush_pending()
                    # Synced chunk by chunk: one sync of a whole checkpoint at its end
                    # would hold the disk, and the journal syncs queued behind it, for as
                    # long as all of it takes to write (tens of ms per 10 MB here).
                    self._files.fdatasync(self._fd)
        if record is not None:
            self._close_record(record, rows, live)
        self._flush_pending()
        return written

    def _close_record(
        self,
        record: _Record,
        rows: dict[int, list[tuple[bytes, bytes]]],
        live: dict[int, dict[int, int]],
    ) -> None:
        """Queue a whole record for the log being filled and account its rows and bytes."""
        self._pending += record.parts()
        self._pending_bytes += record.size
        rows.setdefault(record.ledger_id, []).extend(record.rows(self.log_id))
        per_ledger = live.setdefault(self.log_id, {})
        per_ledger[record.ledger_id] = per_ledger.get(record.ledger_id, 0) + record.size
        self._offset += record.size

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
        self._pending_bytes = 0
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


class _Record:
    """A batch record being put together: entries of one ledger from one or more units,
    back to back in the body, with the runs of consecutive ids they make."""

    __slots__ = ("body", "count", "ledger_id", "offset", "runs", "size")

    def __init__(self, ledger_id: int, offset: int) -> None:
        self.ledger_id = ledger_id
        self.offset = offset  # where the record starts in its log
        self.body: list[bytes | bytearray | memoryview] = []
        self.count = 0
        self.size = BATCH.size  # header and body so far
        # Runs of consecutive ids: [first id, where its first entry starts, lengths].
        self.runs: list[tuple[int, int, list[int]]] = []

    def take(self, unit: Unit, begin: int, end: int) -> None:
        """Append entries ``begin..end-1`` of ``unit``."""
        ids = unit.ids
        first = ids[begin]
        lengths = unit.lengths(begin, end)
        runs = self.runs
        if ids[end - 1] - first == end - 1 - begin:  # consecutive: one run
            if runs and runs[-1][0] + len(runs[-1][2]) == first:
                runs[-1][2].extend(lengths)
            else:
                runs.append((first, self.offset + self.size, lengths))
        else:  # a bookie of a striped ensemble: a run per stretch of consecutive ids
            position = self.offset + self.size
            for index in range(begin, end):
                length = lengths[index - begin]
                if runs and runs[-1][0] + len(runs[-1][2]) == ids[index]:
                    runs[-1][2].append(length)
                else:
                    runs.append((ids[index], position, [length]))
                position += length
        whole = (
            begin == 0 and end == len(ids) and unit.starts[0] == 0 and unit.stop == len(unit.blob)
        )
        window = unit.blob if whole else unit.window(begin, end)
        self.body.append(window)
        self.count += end - begin
        self.size += len(window)

    def parts(self) -> list[bytes | bytearray | memoryview]:
        """The record's bytes: its header, then its body."""
        head = BATCH.pack(self.size - BATCH.size, self.ledger_id, self.count, 0)[:_BATCH_CHECKED]
        return [head + ROW_CRC.pack(crc32c.crc32c(head)), *self.body]

    def rows(self, log_id: int) -> list[tuple[bytes, bytes]]:
        """The run rows of the record's entries in log ``log_id`` (a run is cut at
        MAX_RUN_ENTRIES entries)."""
        made = []
        for first, offset, lengths in self.runs:
            for cut in range(0, len(lengths), MAX_RUN_ENTRIES):
                piece = lengths[cut : cut + MAX_RUN_ENTRIES]
                key = _RUN_KEY.pack(self.ledger_id, first + cut)
                payload = RUN_HEAD.pack(log_id, offset) + struct.pack(f">{len(piece)}I", *piece)
                made.append(
                    (key, ROW_CRC.pack(crc32c.crc32c(payload, crc32c.crc32c(key))) + payload)
                )
                offset += sum(piece)
        return made


def _check_ledger(ledger_id: int) -> None:
    """ValueError for a ledger id an entry log cannot hold."""
    if not 0 <= ledger_id <= _INT64_MAX:
        raise ValueError(f"ledger id out of range [0, {_INT64_MAX}]: {ledger_id!r}")


__all__ = [
    "BATCH",
    "ENTRY_LOG_VERSION",
    "LOG_HEADER",
    "RECORD",
    "EntryLogWriter",
    "check_log_versions",
    "entry_log_path",
    "log_format",
    "log_header",
    "records_start",
]

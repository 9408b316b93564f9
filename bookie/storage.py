"""Entry storage: write cache, interleaved entry logs, LMDB index, checkpoints and GC.

Layout under ``data_dir``:

- ``entrylogs/NNNNNNNNNN.log`` — entries of many ledgers, appended at checkpoints. Each
  record is ``data_len:u32 ledger:i64 entry:i64 lac:i64 digest:u32`` followed by the data.
- ``index/`` — one LMDB environment with four tables: ``entries`` ((ledger, entry) ->
  (log, offset, record length)), ``ledgers`` (ledger -> :class:`LedgerState` record),
  ``logs`` (log -> live bytes per ledger, for GC) and ``meta`` (checkpoint mark, next
  log id).

A checkpoint appends the frozen write cache to the current entry log, fsyncs it, and only
then commits the index rows, ledger states and the new journal mark in one LMDB
transaction (LMDB syncs on commit). So the mark never passes a record whose entry is not
durable in an entry log, and an index row never points at bytes that are not on disk.

Reads check the stored digest (CRC32C over header and payload, walog/digest.py) and the
record header against the index key: a damaged record is never served.

Everything here is blocking; the core runs it in dedicated threads.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import lmdb
import structlog

from bookie.journal import JournalMark, StorageIOError, fsync_dir
from walog.digest import entry_digest

_log = structlog.get_logger(__name__)

_RECORD = struct.Struct(">IqqqI")
_KEY = struct.Struct(">qq")
_LEDGER_KEY = struct.Struct(">q")
_LOG_KEY = struct.Struct(">I")
_LOCATION = struct.Struct(">IQI")
_MARK = struct.Struct(">QQ")
_MAX_ID = (1 << 63) - 1
_MAP_SIZE = 1 << 40  # address space only; LMDB files grow as needed
_WRITE_CHUNK_BYTES = 1024 * 1024  # entry-log writes are batched into chunks of this size
_COMPACT_BELOW = 0.5  # compact an entry log once less than this share of it is live


class StoredRecord(NamedTuple):
    """An entry as stored: the client verifies ``digest`` end to end."""

    entry_id: int
    lac: int
    data: bytes
    digest: int


class CachedEntry(NamedTuple):
    """An entry held in the write cache."""

    lac: int
    digest: int
    data: bytes


class Location(NamedTuple):
    """Where an entry lives: entry log id, record offset and record length."""

    log_id: int
    offset: int
    length: int


class WriteCache:
    """Entries received since the last checkpoint, by ledger then entry id (memory only)."""

    def __init__(self) -> None:
        self.ledgers: dict[int, dict[int, CachedEntry]] = {}
        self.bytes = 0
        self.count = 0

    def put(self, ledger_id: int, entry_id: int, entry: CachedEntry) -> bool:
        """Insert; False (and no change) when the entry is already present."""
        entries = self.ledgers.setdefault(ledger_id, {})
        if entry_id in entries:
            return False
        entries[entry_id] = entry
        self.bytes += len(entry.data) + _RECORD.size
        self.count += 1
        return True

    def get(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        """The cached entry or None."""
        entries = self.ledgers.get(ledger_id)
        return None if entries is None else entries.get(entry_id)

    def drop_ledger(self, ledger_id: int) -> None:
        """Forget a ledger's entries."""
        entries = self.ledgers.pop(ledger_id, None)
        if entries:
            self.bytes -= sum(len(e.data) + _RECORD.size for e in entries.values())
            self.count -= len(entries)


def entry_log_path(directory: Path, log_id: int) -> Path:
    """Path of entry log ``log_id``."""
    return directory / f"{log_id:010d}.log"


class EntryStorage:
    """Entry logs plus the LMDB index. Not thread-safe for writers: one writer thread
    calls :meth:`checkpoint` and :meth:`delete_ledgers`; readers may run concurrently."""

    def __init__(self, data_dir: Path, *, entry_log_file_bytes: int) -> None:
        self.log_dir = data_dir / "entrylogs"
        self.index_dir = data_dir / "index"
        self._log_bytes_limit = entry_log_file_bytes
        for directory in (self.log_dir, self.index_dir):
            if not directory.exists():
                directory.mkdir(parents=True)
                fsync_dir(directory.parent)
        self._lock_fd = _lock_directory(data_dir)
        env: lmdb.Environment | None = None
        try:
            env = lmdb.open(
                str(self.index_dir), map_size=_MAP_SIZE, max_dbs=4, sync=True, metasync=True
            )
            # A damaged index fails here (MDB_CORRUPTED, MDB_PAGE_NOTFOUND), not only in open.
            self._entries = env.open_db(b"entries")
            self._ledgers = env.open_db(b"ledgers")
            self._logs = env.open_db(b"logs")
            self._meta = env.open_db(b"meta")
        except lmdb.Error as exc:
            if env is not None:
                env.close()
            os.close(self._lock_fd)
            raise StorageIOError(f"cannot open index {self.index_dir}: {exc}") from exc
        self._env = env
        self._write_fd = -1
        self._write_log = -1
        self._write_offset = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.logs_deleted = 0
        self.logs_compacted = 0
        self._remove_orphan_logs()

    # -- reading state at open ----------------------------------------------------------

    def checkpoint_mark(self) -> JournalMark:
        """The journal position replay starts from (0, 0 before the first checkpoint)."""
        with self._env.begin(db=self._meta) as txn:
            raw = txn.get(b"mark")
        return JournalMark(*_MARK.unpack(raw)) if raw else JournalMark(0, 0)

    def ledger_states(self) -> dict[int, bytes]:
        """Every stored ledger state record."""
        with self._env.begin(db=self._ledgers) as txn:
            return {
                _LEDGER_KEY.unpack(bytes(key))[0]: bytes(value)
                for key, value in txn.cursor(db=self._ledgers)
            }

    def _remove_orphan_logs(self) -> None:
        """Delete entry logs no index row points into (a checkpoint that crashed before
        its index commit); their entries are still in the journal after the mark."""
        with self._env.begin(db=self._logs) as txn:
            known = {_LOG_KEY.unpack(bytes(k))[0] for k, _ in txn.cursor(db=self._logs)}
        for path in self.log_dir.glob("*.log"):
            if path.stem.isdigit() and int(path.stem) not in known:
                _log.info("removing unreferenced entry log", file=str(path))
                path.unlink()

    # -- reads --------------------------------------------------------------------------

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id the index holds for the ledger; -1 if none."""
        with self._env.begin(db=self._entries) as txn:
            cursor = txn.cursor()
            found = ledger_id < _MAX_ID and cursor.set_range(_KEY.pack(ledger_id + 1, 0))
            if not (cursor.prev() if found else cursor.last()):
                return -1
            led, entry_id = _KEY.unpack(bytes(cursor.key()))
            return int(entry_id) if led == ledger_id else -1

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        """True when the index has the entry."""
        with self._env.begin(db=self._entries) as txn:
            return txn.get(_KEY.pack(ledger_id, entry_id)) is not None

    def read_run(
        self, ledger_id: int, first: int, last: int, max_bytes: int
    ) -> tuple[list[StoredRecord], bool]:
        """Consecutive stored entries from ``first`` (at most up to ``last``, at least one
        if present, at most ``max_bytes`` of data after the first).

        Returns ``(records, damaged)``: ``damaged`` is True when the run stopped at a
        record that failed its checks (logged, never returned).
        """
        locations: list[Location] = []
        try:
            with self._env.begin(db=self._entries) as txn:
                cursor = txn.cursor()
                expected = first
                if cursor.set_key(_KEY.pack(ledger_id, first)):
                    for key, value in cursor:
                        led, entry_id = _KEY.unpack(bytes(key))
                        if led != ledger_id or entry_id != expected or entry_id > last:
                            break
                        locations.append(Location(*_LOCATION.unpack(bytes(value))))
                        expected += 1
        except lmdb.Error as exc:
            _log.error("index read failed", ledger=ledger_id, entry=first, error=str(exc))
            return [], True
        records: list[StoredRecord] = []
        size = 0
        files: dict[int, int] = {}
        try:
            for offset, location in enumerate(locations):
                entry_id = first + offset
                record = self._read_one(files, ledger_id, entry_id, location)
                if record is None:
                    return records, True
                if records and size + len(record.data) > max_bytes:
                    break
                records.append(record)
                size += len(record.data)
        finally:
            for fd in files.values():
                os.close(fd)
        return records, False

    def _read_one(
        self, files: dict[int, int], ledger_id: int, entry_id: int, location: Location
    ) -> StoredRecord | None:
        try:
            fd = files.get(location.log_id)
            if fd is None:
                fd = os.open(entry_log_path(self.log_dir, location.log_id), os.O_RDONLY)
                files[location.log_id] = fd
            raw = os.pread(fd, location.length, location.offset)
        except FileNotFoundError:
            # A compaction moved the entry and removed the log: look it up again.
            with self._env.begin(db=self._entries) as txn:
                value = txn.get(_KEY.pack(ledger_id, entry_id))
            if value is None or Location(*_LOCATION.unpack(value)) == location:
                _log.error(
                    "entry log missing", ledger=ledger_id, entry=entry_id, log=location.log_id
                )
                return None
            return self._read_one(files, ledger_id, entry_id, Location(*_LOCATION.unpack(value)))
        except OSError as exc:
            _log.error("entry read failed", ledger=ledger_id, entry=entry_id, error=str(exc))
            return None
        problem = _check_record(raw, ledger_id, entry_id, location.length)
        if problem is not None:
            _log.error(
                "damaged entry not served",
                ledger=ledger_id,
                entry=entry_id,
                log=location.log_id,
                offset=location.offset,
                problem=problem,
            )
            return None
        _, _, _, lac, digest = _RECORD.unpack_from(raw)
        return StoredRecord(entry_id, lac, raw[_RECORD.size :], digest)

    # -- checkpoint -----------------------------------------------------------------------

    def checkpoint(
        self,
        entries: Iterable[tuple[int, int, CachedEntry]],
        states: dict[int, bytes],
        mark: JournalMark,
    ) -> int:
        """Append ``entries`` to entry logs, fsync them, then commit index rows, ledger
        states and ``mark`` in one transaction. Returns the number of entries written."""
        rows: list[tuple[bytes, bytes]] = []
        live: dict[int, dict[int, int]] = {}
        try:
            for ledger_id, entry_id, entry in entries:
                location = self._append(ledger_id, entry_id, entry)
                rows.append((_KEY.pack(ledger_id, entry_id), _LOCATION.pack(*location)))
                per_ledger = live.setdefault(location.log_id, {})
                per_ledger[ledger_id] = per_ledger.get(ledger_id, 0) + location.length
            self._flush_pending()
            if self._write_fd >= 0:
                os.fsync(self._write_fd)
        except (OSError, lmdb.Error) as exc:
            # The log's tail is unknown now: never append to it again.
            failed_log = self._write_log
            self._pending.clear()
            self._pending_bytes = 0
            self._close_write_log()
            raise StorageIOError(f"entry log {failed_log} write failed: {exc}") from exc
        try:
            with self._env.begin(write=True) as txn:
                for key, value in rows:
                    txn.put(key, value, db=self._entries)
                for log_id, per_ledger in live.items():
                    self._add_live(txn, log_id, per_ledger)
                for ledger_id, raw in states.items():
                    txn.put(_LEDGER_KEY.pack(ledger_id), raw, db=self._ledgers)
                txn.put(b"mark", _MARK.pack(*mark), db=self._meta)
        except lmdb.Error as exc:
            raise StorageIOError(f"index commit failed: {exc}") from exc
        return len(rows)

    def _add_live(self, txn: lmdb.Transaction, log_id: int, per_ledger: dict[int, int]) -> None:
        key = _LOG_KEY.pack(log_id)
        raw = txn.get(key, db=self._logs)
        doc: dict[str, int] = json.loads(bytes(raw)) if raw else {}
        for ledger_id, size in per_ledger.items():
            doc[str(ledger_id)] = doc.get(str(ledger_id), 0) + size
        doc["_total"] = doc.get("_total", 0) + sum(per_ledger.values())
        txn.put(key, json.dumps(doc).encode(), db=self._logs)

    def _append(self, ledger_id: int, entry_id: int, entry: CachedEntry) -> Location:
        if self._write_fd < 0 or self._write_offset >= self._log_bytes_limit:
            self._roll()
        self._pending.append(
            _RECORD.pack(len(entry.data), ledger_id, entry_id, entry.lac, entry.digest)
        )
        self._pending.append(entry.data)
        offset = self._write_offset
        length = _RECORD.size + len(entry.data)
        self._write_offset += length
        self._pending_bytes += length
        if self._pending_bytes >= _WRITE_CHUNK_BYTES:
            self._flush_pending()
        return Location(self._write_log, offset, length)

    def _close_write_log(self) -> None:
        """Stop appending to the current entry log; the next append starts a new one."""
        if self._write_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
        self._write_fd = -1
        self._write_log = -1

    def _flush_pending(self) -> None:
        """Write the buffered records to the current entry log (one syscall per chunk)."""
        view = memoryview(b"".join(self._pending))
        self._pending.clear()
        self._pending_bytes = 0
        while view:
            written = os.write(self._write_fd, view)
            view = view[written:]

    def _roll(self) -> None:
        if self._write_fd >= 0:
            self._flush_pending()
            os.fsync(self._write_fd)
            os.close(self._write_fd)
            self._write_fd = -1
        with self._env.begin(write=True, db=self._meta) as txn:
            raw = txn.get(b"next_log")
            log_id = int(raw) if raw else 1
            txn.put(b"next_log", str(log_id + 1).encode())
        path = entry_log_path(self.log_dir, log_id)
        self._write_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        fsync_dir(self.log_dir)
        self._write_log = log_id
        self._write_offset = 0

    # -- garbage collection ---------------------------------------------------------------

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> None:
        """Drop the ledgers' index rows and state, then reclaim entry logs: a log with no
        live ledger left is deleted, one mostly dead is compacted into the current log."""
        doomed = set(ledger_ids)
        if not doomed:
            return
        try:
            with self._env.begin(write=True) as txn:
                for ledger_id in doomed:
                    txn.delete(_LEDGER_KEY.pack(ledger_id), db=self._ledgers)
                    cursor = txn.cursor(db=self._entries)
                    cursor.set_range(_KEY.pack(ledger_id, 0))
                    while True:
                        key = bytes(cursor.key())
                        if not key or _KEY.unpack(key)[0] != ledger_id or not cursor.delete():
                            break
                logs = list(txn.cursor(db=self._logs))
                for key, value in logs:
                    doc = json.loads(bytes(value))
                    if any(str(ledger_id) in doc for ledger_id in doomed):
                        for ledger_id in doomed:
                            doc.pop(str(ledger_id), None)
                        txn.put(bytes(key), json.dumps(doc).encode(), db=self._logs)
        except lmdb.Error as exc:
            raise StorageIOError(f"index update failed: {exc}") from exc
        try:
            self._reclaim()
        except (OSError, lmdb.Error) as exc:
            raise StorageIOError(f"reclaiming entry logs failed: {exc}") from exc

    def _reclaim(self) -> None:
        with self._env.begin(db=self._logs) as txn:
            log_ids = [_LOG_KEY.unpack(bytes(k))[0] for k, _ in txn.cursor(db=self._logs)]
        for log_id in log_ids:
            # Read the accounting afresh: a compaction earlier in this loop may have moved
            # live entries into the log being filled.
            with self._env.begin(db=self._logs) as txn:
                raw = txn.get(_LOG_KEY.pack(log_id))
            if raw is None:
                continue
            doc: dict[str, int] = json.loads(bytes(raw))
            total = doc.get("_total", 0)
            live = sum(size for name, size in doc.items() if name != "_total")
            if log_id == self._write_log:
                if live == 0:
                    # Nothing live in the log being filled: start a new one at the next
                    # checkpoint and drop this one.
                    self._close_write_log()
                    self._drop_log(log_id)
                continue
            if live == 0:
                self._drop_log(log_id)
            elif total and live / total < _COMPACT_BELOW:
                self._compact(log_id, [int(name) for name in doc if name != "_total"])

    def _drop_log(self, log_id: int) -> None:
        with self._env.begin(write=True, db=self._logs) as txn:
            txn.delete(_LOG_KEY.pack(log_id))
        entry_log_path(self.log_dir, log_id).unlink(missing_ok=True)
        self.logs_deleted += 1
        _log.info("entry log deleted", log=log_id)

    def _compact(self, log_id: int, ledger_ids: list[int]) -> None:
        """Copy the live entries of ``log_id`` to the current log, repoint the index, then
        delete ``log_id`` (readers that raced the deletion look the entry up again)."""
        moved: list[tuple[int, int, CachedEntry]] = []
        with self._env.begin(db=self._entries) as txn:
            for ledger_id in ledger_ids:
                cursor = txn.cursor()
                if not cursor.set_range(_KEY.pack(ledger_id, 0)):
                    continue
                for key, value in cursor:
                    led, entry_id = _KEY.unpack(bytes(key))
                    if led != ledger_id:
                        break
                    location = Location(*_LOCATION.unpack(bytes(value)))
                    if location.log_id != log_id:
                        continue
                    record = self._read_one({}, ledger_id, entry_id, location)
                    if record is not None:
                        cached = CachedEntry(record.lac, record.digest, record.data)
                        moved.append((ledger_id, entry_id, cached))
        mark = self.checkpoint_mark()
        self.checkpoint(moved, {}, mark)
        self._drop_log(log_id)
        self.logs_compacted += 1

    def close(self) -> None:
        """Close the current entry log and the index."""
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1
        self._env.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = -1


def _lock_directory(data_dir: Path) -> int:
    """Take an exclusive lock on ``data_dir/LOCK`` so two bookies (or a bookie and its
    not yet dead predecessor) never write the same files. The kernel drops it when the
    holder exits, however it exits."""
    path = data_dir / "LOCK"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StorageIOError(
            f"bookie storage in {data_dir} is in use by another process (lock on {path})"
        ) from exc
    return fd


def _check_record(raw: bytes, ledger_id: int, entry_id: int, length: int) -> str | None:
    if len(raw) != length or length < _RECORD.size:
        return f"short record ({len(raw)} of {length} bytes)"
    data_len, led, entry, lac, digest = _RECORD.unpack_from(raw)
    if data_len != length - _RECORD.size or led != ledger_id or entry != entry_id:
        return "record header does not match the index"
    if entry_digest(ledger_id, entry_id, lac, memoryview(raw)[_RECORD.size :]) != digest:
        return "digest mismatch"
    return None


__all__ = [
    "CachedEntry",
    "EntryStorage",
    "Location",
    "StoredRecord",
    "WriteCache",
    "entry_log_path",
]

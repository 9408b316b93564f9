"""Reading checked records out of a bookie's entry logs.

:class:`RecordReader` reads the records of a run row (bookie/storage/run_index.py) in one
read, or one record, and checks each against what the index says of it (length, ids and
the digest over its bytes). A record whose log a compaction removed meanwhile is looked
up again in the index. A damaged record is logged and never served; a read the disk
failed is either None or, for compaction, raised.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

import lmdb
import structlog

from bookie.storage.entry_log_writer import (
    LOG_HEADER,
    RECORD,
    entry_log_path,
    log_format,
)
from bookie.storage.files import Files
from bookie.storage.index import Run
from bookie.storage.run_index import find_run
from walog.wire.digest import entry_digest
from walog.wire.packing import ENTRY_HEADER

_log = structlog.get_logger(__name__)

_BATCHES = 3  # the first entry-log format of batch records (packed entries)


class StoredRecord(NamedTuple):
    """An entry as stored: the client verifies ``digest`` end to end."""

    entry_id: int
    lac: int
    data: bytes
    digest: int


class Location(NamedTuple):
    """Where an entry lives: entry log id, record offset and record length."""

    log_id: int
    offset: int
    length: int


def check_record(
    raw: bytes | memoryview, ledger_id: int, entry_id: int, length: int, log_format: int | None
) -> str | None:
    """What is wrong with the stored entry ``raw`` that the index says is ``entry_id`` of
    ``ledger_id``, ``length`` bytes long, in a log of ``log_format`` (None: unknown, either
    one is tried); None when nothing is."""
    if log_format is None:
        problem = check_record(raw, ledger_id, entry_id, length, _BATCHES)
        return problem and check_record(raw, ledger_id, entry_id, length, 2)
    header = _header_of(log_format)
    if len(raw) != length or length < header.size:
        return f"short record ({len(raw)} of {length} bytes)"
    if log_format >= _BATCHES:
        entry, lac, digest, data_len = header.unpack_from(raw)
        led = ledger_id  # the digest covers it
    else:
        data_len, led, entry, lac, digest = header.unpack_from(raw)
    if data_len != length - header.size or led != ledger_id or entry != entry_id:
        return "record header does not match the index"
    if entry_digest(ledger_id, entry_id, lac, memoryview(raw)[header.size :]) != digest:
        return "digest mismatch"
    return None


def stored_record(raw: memoryview, entry_id: int, log_format: int) -> StoredRecord:
    """The entry in ``raw``, which passed :func:`check_record` for ``log_format``."""
    if log_format >= _BATCHES:
        _, lac, digest, _ = ENTRY_HEADER.unpack_from(raw)
        return StoredRecord(entry_id, lac, bytes(raw[ENTRY_HEADER.size :]), digest)
    _, _, _, lac, digest = RECORD.unpack_from(raw)
    return StoredRecord(entry_id, lac, bytes(raw[RECORD.size :]), digest)


def _header_of(log_format: int) -> struct.Struct:
    return ENTRY_HEADER if log_format >= _BATCHES else RECORD


class RecordReader:
    """Reads records from the entry logs in ``log_dir``, following moves in the index
    (``env``, table ``entries``)."""

    def __init__(
        self, env: lmdb.Environment, entries: lmdb._Database, files: Files, log_dir: Path
    ) -> None:
        self._env = env
        self._entries = entries
        self._files = files
        self.log_dir = log_dir
        # Each log's format, read from its header at its first read (logs never change
        # format; a compaction writes new ones under new ids).
        self._formats: dict[int, int | None] = {}

    def read_piece(
        self, files: dict[int, int], ledger_id: int, run: Run, *, raise_unreadable: bool = False
    ) -> list[StoredRecord | None]:
        """The records of ``run`` (a run row or a piece of one) in one read, each checked:
        None for one that is damaged, or unreadable (a read the disk failed: every record
        from there on; with ``raise_unreadable`` the OSError is raised instead)."""
        try:
            raw = self._files.pread(self._fd_of(files, run.log_id), sum(run.lengths), run.offset)
        except FileNotFoundError:
            # A compaction moved the entries and removed the log: look each up again.
            return [
                self.read_one(
                    files,
                    ledger_id,
                    entry_id,
                    Location(*run.location(entry_id)),
                    raise_unreadable=raise_unreadable,
                )
                for entry_id in range(run.first, run.last + 1)
            ]
        except OSError as exc:
            if raise_unreadable:
                raise
            _log.error("entry read failed", ledger=ledger_id, entry=run.first, error=str(exc))
            return [None]
        records: list[StoredRecord | None] = []
        position = 0
        view = memoryview(raw)
        for entry_id, length in enumerate(run.lengths, run.first):
            record = view[position : position + length]
            position += length
            records.append(self._checked(record, ledger_id, entry_id, run, length))
        return records

    def _fd_of(self, files: dict[int, int], log_id: int) -> int:
        """A descriptor of entry log ``log_id``, opened once per read (FileNotFoundError),
        its format known (OSError when the disk fails to read its header)."""
        fd = files.get(log_id)
        if fd is None:
            path = entry_log_path(self.log_dir, log_id)
            fd = self._files.open(path, os.O_RDONLY)
            files[log_id] = fd
            if log_id not in self._formats:  # a read the disk fails is a failed read
                found = log_format(self._files.pread(fd, LOG_HEADER.size, 0), path)
                # Only an intact header is sure of its format: no header at all (format
                # 1) may be a damaged one, and either format is tried then.
                self._formats[log_id] = None if found == 1 else found
        return fd

    def forget(self, log_id: int) -> None:
        """Forget a removed log's format."""
        self._formats.pop(log_id, None)

    def _checked(
        self, raw: memoryview, ledger_id: int, entry_id: int, run: Run, length: int
    ) -> StoredRecord | None:
        """The record ``raw`` of ``entry_id`` if it passes its checks (else logged)."""
        known = self._formats.get(run.log_id)
        problem = check_record(raw, ledger_id, entry_id, length, known)
        if problem is not None:
            _log.error(
                "damaged entry not served",
                ledger=ledger_id,
                entry=entry_id,
                log=run.log_id,
                offset=run.location(entry_id)[1],
                problem=problem,
            )
            return None
        if known is None:  # a damaged log header: the format whose checks passed
            known = 2 if check_record(raw, ledger_id, entry_id, length, _BATCHES) else _BATCHES
        return stored_record(raw, entry_id, known)

    def read_one(
        self,
        files: dict[int, int],
        ledger_id: int,
        entry_id: int,
        location: Location,
        *,
        raise_unreadable: bool = False,
    ) -> StoredRecord | None:
        """The record at ``location``, checked; None when it is damaged (read, but its
        header or digest is wrong) or its log is gone. A read the disk failed (an OSError:
        the record was never seen) is None too, or with ``raise_unreadable`` raised."""
        one = Run(entry_id, location.log_id, location.offset, (location.length,))
        try:
            fd = self._fd_of(files, location.log_id)
            raw = self._files.pread(fd, location.length, location.offset)
        except FileNotFoundError:
            # A compaction moved the entry and removed the log: look it up again.
            with self._env.begin(db=self._entries) as txn:
                moved = find_run(txn.cursor(), ledger_id, entry_id).run
            if moved is None or Location(*moved.location(entry_id)) == location:
                _log.error(
                    "entry log missing", ledger=ledger_id, entry=entry_id, log=location.log_id
                )
                return None
            return self.read_one(
                files,
                ledger_id,
                entry_id,
                Location(*moved.location(entry_id)),
                raise_unreadable=raise_unreadable,
            )
        except OSError as exc:
            if raise_unreadable:
                raise
            _log.error("entry read failed", ledger=ledger_id, entry=entry_id, error=str(exc))
            return None
        return self._checked(memoryview(raw), ledger_id, entry_id, one, location.length)


__all__ = ["Location", "RecordReader", "StoredRecord", "check_record", "stored_record"]

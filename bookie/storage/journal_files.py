"""The journal on disk: file names and header, record framing, recycled files, replay.

A journal file starts with a 16-byte header (``WALJ``, format version, its sequence
number); records follow, framed as ``length:u32 crc32c:u32 payload`` (big endian). The CRC
covers the payload and is seeded with the file's sequence number, so a record is valid in
the one file it was written to. That lets the journal recycle files (bookie/storage/journal.py):
a retired file is renamed to the next sequence number and overwritten from the start, and
the old records left after the new ones fail their CRC under the new number, so replay
stops at the new records' end. Files without the header, written before it existed, are
read with plain CRCs (and never recycled).

Replay reads the files from a checkpoint mark; the first record with a bad frame (short
header, absurd length, short payload, CRC mismatch) and everything after it in that file
is cut off (the file is truncated there), so a torn tail is never served. Space reserved
for a file and never written reads as zeros: a zero frame ends the file's records the same
way, quietly.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import NamedTuple, TypeVar

import crc32c
import structlog

from bookie.storage.files import LOCAL_FILES, Files
from walog.errors import BookieError
from walog.format_versions import newer_version_message

_log = structlog.get_logger("bookie.storage.journal")

FRAME = struct.Struct(">II")
"""A record's frame: payload length and CRC32C (seeded, see :func:`crc_seed`)."""
_HEADER = struct.Struct(">4sIQ")  # magic, format version, file sequence number
_MAGIC = b"WALJ"
_VERSION = 2  # 1: files without a header, read as such
_SEQ = struct.Struct(">Q")
_SUFFIX = ".journal"
_RECYCLED_SUFFIX = ".recycled"
_UNWRITTEN = bytes(FRAME.size)
HEADER_BYTES = _HEADER.size
"""Where a journal file's first record starts."""
_REPLAY_CHUNK = 4 * 1024 * 1024  # replay reads files in chunks of this size
_SCAN_CHUNK = 16 * 1024 * 1024  # the compiled scanner's chunks


def crc_seed(file_seq: int) -> int:
    """The CRC32C every record CRC of journal file ``file_seq`` starts from."""
    return int(crc32c.crc32c(_SEQ.pack(file_seq)))


def file_header(file_seq: int) -> bytes:
    """The header journal file ``file_seq`` starts with."""
    return _HEADER.pack(_MAGIC, _VERSION, file_seq)


def _records_start(head: bytes, file_seq: int, path: Path) -> tuple[int, int] | None:
    """``(offset of the first record, CRC seed)`` for a file starting with ``head``, or None
    when it holds no record of its own: a header naming another file (a recycled file
    renamed before its new header reached the disk).

    Raises:
        StorageIOError: the header names a newer format version than this bookie reads
            (written by a later release): replaying it as records would guess.
    """
    if len(head) < _HEADER.size or head[:4] != _MAGIC:
        return 0, 0  # written before headers (version 1): plain CRCs from the start
    _, version, seq = _HEADER.unpack_from(head)
    if version > _VERSION:
        raise StorageIOError(
            newer_version_message(f"journal file {path}", version, _VERSION, "the bookie")
        )
    if version != _VERSION or seq != file_seq:
        return None
    return _HEADER.size, crc_seed(file_seq)


class StorageIOError(BookieError):
    """The bookie's disks failed a read, write or sync; the store stops accepting writes."""


class JournalMark(NamedTuple):
    """A position in the journal: file sequence number and byte offset in that file."""

    file_seq: int
    offset: int


def journal_files(directory: Path, files: Files = LOCAL_FILES) -> list[tuple[int, Path]]:
    """Journal files in ``directory`` as ``(sequence number, path)``, oldest first."""
    found: list[tuple[int, Path]] = []
    for name in files.listdir(directory):
        path = directory / name
        if path.suffix == _SUFFIX and path.stem.isdigit():
            found.append((int(path.stem), path))
    return sorted(found)


def has_header(path: Path, files: Files = LOCAL_FILES) -> bool:
    """Whether a journal file starts with a header (only those may be recycled: the records
    of a file without one would stay valid under a new name)."""
    fd = files.open(path, os.O_RDONLY)
    try:
        return files.pread(fd, len(_MAGIC), 0) == _MAGIC
    finally:
        files.close(fd)


def recycled_files(directory: Path, files: Files = LOCAL_FILES) -> list[Path]:
    """Retired journal files kept for reuse, oldest first."""
    return sorted(
        directory / name for name in files.listdir(directory) if name.endswith(_RECYCLED_SUFFIX)
    )


def recycle(path: Path, files: Files = LOCAL_FILES) -> None:
    """Keep a retired journal file for reuse, out of the journal's view."""
    files.replace(path, path.with_suffix(_RECYCLED_SUFFIX))


def journal_file(directory: Path, file_seq: int) -> Path:
    """Path of journal file ``file_seq``."""
    return directory / f"{file_seq:012d}{_SUFFIX}"


def _frame_error(header: bytes, payload: bytes | None, max_record_bytes: int) -> str | None:
    if len(header) < FRAME.size:
        return "short frame header"
    length, _ = FRAME.unpack(header)
    if length == 0 or length > max_record_bytes:
        return f"bad record length {length}"
    if payload is None:
        return None
    if len(payload) < length:
        return "short record"
    return None


class _ChunkReader:
    """Reads a file forward in large chunks (replay reads every record of a file once)."""

    def __init__(self, files: Files, fd: int, offset: int) -> None:
        self._files = files
        self._fd = fd
        self._buffer = b""
        self._start = offset  # file offset of _buffer[0]
        self._pos = 0  # read position within _buffer

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes from the current position (fewer only at the end)."""
        if self._pos + size > len(self._buffer):
            self._start += self._pos
            rest = self._buffer[self._pos :]
            more = self._files.pread(
                self._fd, max(size - len(rest), _REPLAY_CHUNK), self._start + len(rest)
            )
            self._buffer, self._pos = rest + more, 0
        data = self._buffer[self._pos : self._pos + size]
        self._pos += len(data)
        return data


Scan = Callable[[memoryview, int, int], tuple[list[tuple[int, int]], int, str | None]]
"""The compiled frame scanner (``bookie.storage._fastreplay.scan_frames``): the intact
records of a chunk, where the first other one starts, and what is wrong with it (None: it
is not whole in the chunk)."""


def replay(
    directory: Path, mark: JournalMark, max_record_bytes: int, files: Files = LOCAL_FILES
) -> Iterator[tuple[bytes, JournalMark]]:
    """Yield ``(payload, position after it)`` for every intact record from ``mark`` on.

    A file's first bad record and everything after it are cut (the file is truncated at
    that record), and every replayed file is fdatasync'ed, so a record that is replayed
    is durable, even if it only reached the page cache before a process crash. Later
    files are still read: each file frames its records independently. Blocking.
    """

    def read(fd: int, file_seq: int, offset: int, seed: int) -> _Records[bytes]:
        return _read_records(files, fd, file_seq, offset, seed, max_record_bytes)

    return _replay(directory, mark, files, read)


def replay_scanned(
    directory: Path, mark: JournalMark, max_record_bytes: int, scan: Scan
) -> Iterator[tuple[memoryview, JournalMark]]:
    """:func:`replay` of the bookie's own files through the compiled scanner ``scan``:
    files read in chunks of ``_SCAN_CHUNK`` bytes, each payload a memoryview of a buffer
    that later reads overwrite: valid only until the next record is asked for (copy what
    is kept). The same records and the same cuts."""

    def read(fd: int, file_seq: int, offset: int, seed: int) -> _Records[memoryview]:
        return _scan_records(fd, file_seq, offset, seed, max_record_bytes, scan)

    return _replay(directory, mark, LOCAL_FILES, read)


_P = TypeVar("_P", bytes, memoryview)
_Cut = tuple[int, bytes, str]  # where a file's records end: offset, its frame header, why
_Records = Generator[tuple[_P, JournalMark], None, _Cut | None]


def _replay(
    directory: Path,
    mark: JournalMark,
    files: Files,
    read: Callable[[int, int, int, int], _Records[_P]],
) -> Iterator[tuple[_P, JournalMark]]:
    """:func:`replay` with ``read(fd, file_seq, offset, seed)`` reading a file's records."""
    for file_seq, path in journal_files(directory, files):
        if file_seq < mark.file_seq:
            continue
        fd = files.open(path, os.O_RDWR)
        try:
            start = _records_start(files.pread(fd, _HEADER.size, 0), file_seq, path)
            if start is None:
                _log.info("journal file holds no records of its own", file=str(path))
                continue
            first, seed = start
            offset = max(first, mark.offset if file_seq == mark.file_seq else 0)
            cut = yield from read(fd, file_seq, offset, seed)
            if cut is not None:
                # A torn tail, or a recycled file's old records: never acknowledged (or
                # long checkpointed) either way. Zeros: reserved, never written.
                offset, header, problem = cut
                _log.log(
                    logging.DEBUG if header == _UNWRITTEN else logging.INFO,
                    "journal tail cut",
                    file=str(path),
                    offset=offset,
                    cut_bytes=files.size(fd) - offset,
                    problem="reserved space" if header == _UNWRITTEN else problem,
                )
                files.ftruncate(fd, offset)
            files.fsync(fd)
        finally:
            files.close(fd)


def _read_records(
    files: Files, fd: int, file_seq: int, offset: int, seed: int, max_record_bytes: int
) -> _Records[bytes]:
    """The records of one file from ``offset``, read record by record; returns where they
    end when a bad frame ends them (None: the file ends after its last record)."""
    reader = _ChunkReader(files, fd, offset)
    while True:
        header = reader.read(FRAME.size)
        if not header:
            return None
        problem = _frame_error(header, None, max_record_bytes)
        payload = b""
        if problem is None:
            length, crc = FRAME.unpack(header)
            payload = reader.read(length)
            problem = _frame_error(header, payload, max_record_bytes)
            if problem is None and crc32c.crc32c(payload, seed) != crc:
                problem = "CRC mismatch"
        if problem is not None:
            return offset, header, problem
        offset += FRAME.size + len(payload)
        yield payload, JournalMark(file_seq, offset)


def _scan_records(
    fd: int, file_seq: int, offset: int, seed: int, max_record_bytes: int, scan: Scan
) -> _Records[memoryview]:
    """:func:`_read_records` through the compiled scanner: a chunk at a time, read into one
    buffer that the next read reuses (a fresh buffer per read costs its pages again), the
    payloads views of it. A record not whole in a chunk starts the next read (a larger
    buffer of its own when the record is larger than a chunk)."""
    buffer = memoryview(bytearray(_SCAN_CHUNK))
    size = _SCAN_CHUNK
    while True:
        if size > len(buffer):
            buffer = memoryview(bytearray(size))
        got = os.preadv(fd, [buffer[:size]], offset)
        if not got:
            return None
        chunk = buffer[:got]
        frames, used, problem = scan(chunk, seed, max_record_bytes)
        for start, length in frames:
            yield chunk[start : start + length], JournalMark(file_seq, offset + start + length)
        rest = bytes(chunk[used : used + FRAME.size])
        if problem is not None:
            return offset + used, rest, problem
        if got < size:  # the file ends in the middle of this record (or after it)
            if used == got:
                return None
            payload = bytes(chunk[used + FRAME.size :]) if len(rest) == FRAME.size else None
            return offset + used, rest, _frame_error(rest, payload, max_record_bytes) or ""
        offset += used
        # The next read starts with the record that was not whole in this one, all of it.
        length = FRAME.unpack(rest)[0] if len(rest) == FRAME.size else 0
        size = max(_SCAN_CHUNK, FRAME.size + length)


__all__ = [
    "FRAME",
    "HEADER_BYTES",
    "JournalMark",
    "Scan",
    "StorageIOError",
    "crc_seed",
    "file_header",
    "has_header",
    "journal_file",
    "journal_files",
    "recycle",
    "recycled_files",
    "replay",
    "replay_scanned",
]

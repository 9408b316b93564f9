"""Self-checking rows of the bookie's LMDB index (format version 3). Pure, no I/O.

LMDB does not checksum its pages, so a flipped bit in ``index/data.mdb`` can change a
value, move a row to another key or hide rows behind a damaged branch page without any
error. A bookie must never turn such damage into an answer of absence (NO_SUCH_ENTRY,
NO_SUCH_LEDGER): ledger recovery counts those answers as proof that an entry was never
acknowledged. So every row carries its own checksum and the index keeps enough
redundancy to prove absence:

- Every value is *sealed*: ``crc32c(key + payload):u32 | payload``. The key is inside the
  checksum, so a row whose key bytes changed (moved to another key) fails too.
- The ``entries`` table holds one **run row** per run of consecutive entries of a ledger
  whose records lie back to back in one entry log: key ``(ledger, first entry)``, value
  the log, the offset of the first record and the length of every record of the run
  (:class:`Run`; at most :data:`MAX_RUN_ENTRIES` of them). A format-2 entry row (one
  entry: log, offset, length) is exactly a run row of one entry.
- A ledger row holds, besides the ledger state, the ledger's **index summary**: how many
  entries its run rows hold, the highest of their entry ids and how many run rows there
  are. All three change in the same transaction as the run rows. An entry above the
  summary's highest id (and not in the write cache) is absent for sure; a miss at or
  below it is absence only once the ledger's rows are walked, each verified, their runs
  ascending without overlap, and their entries and rows counted equal to the summary.
- The ``ledgers`` and ``logs`` tables each have a **census** in ``meta``: the number of
  rows and an XOR of a 64-bit hash of every key. A lost or moved row changes it.
- ``meta`` holds fixed keys only (format, mark, next log id, the two censuses); a missing
  one is damage.
"""

from __future__ import annotations

import hashlib
import struct
from typing import NamedTuple

import crc32c

#: Written in ``meta/format``; a store with another version is refused at start.
FORMAT_VERSION = 3
#: The format before run rows: read by migrating its ledger rows at start
#: (bookie/storage/index_audit.py); its entry rows are run rows of one entry already.
PREVIOUS_FORMAT_VERSION = 2
#: The most entries a run row holds (its value stays well inside an LMDB page).
MAX_RUN_ENTRIES = 256
FORMAT_KEY = b"format"
MARK_KEY = b"mark"
NEXT_LOG_KEY = b"next_log"
LEDGERS_CENSUS_KEY = b"census:ledgers"
LOGS_CENSUS_KEY = b"census:logs"
META_KEYS = (FORMAT_KEY, MARK_KEY, NEXT_LOG_KEY, LEDGERS_CENSUS_KEY, LOGS_CENSUS_KEY)
#: The ledgers deleted here (bookie/storage/tombstones.py); absent in an index written
#: before bookies kept them, which reads as none.
TOMBSTONES_KEY = b"tombstones"

ROW_CRC = struct.Struct(">I")
ENTRY_KEY = struct.Struct(">qq")
LEDGER_KEY = struct.Struct(">q")
LOG_KEY = struct.Struct(">I")
#: A run row's value after its crc: log id, offset of the first record; the record
#: lengths (u32 each) follow.
RUN_HEAD = struct.Struct(">IQ")
_RUN_VALUE_MIN = ROW_CRC.size + RUN_HEAD.size + 4
_LENGTH = struct.Struct(">I")
_SUMMARY = struct.Struct(">qqq")  # entries held, highest entry id held (-1: none), run rows
_SUMMARY_V2 = struct.Struct(">qq")  # format 2: entry rows held, highest entry id held
_MARK = struct.Struct(">QQ")
_CENSUS = struct.Struct(">QQ")
_NEXT_LOG = struct.Struct(">I")
_MASK64 = (1 << 64) - 1
_INT64_MAX = (1 << 63) - 1


def format_payload(version: int = FORMAT_VERSION) -> bytes:
    """The payload of ``meta/format`` for ``version``."""
    return f"walog-bookie-index/{version}".encode()


def seal(key: bytes, payload: bytes) -> bytes:
    """The stored value for ``payload`` under ``key``: checksum first."""
    return ROW_CRC.pack(crc32c.crc32c(payload, crc32c.crc32c(key))) + payload


def unseal(key: bytes, value: bytes) -> bytes | None:
    """The payload of a sealed value, or None when the row fails its checksum."""
    if len(value) < ROW_CRC.size:
        return None
    payload = value[ROW_CRC.size :]
    (crc,) = ROW_CRC.unpack_from(value)
    return payload if crc32c.crc32c(payload, crc32c.crc32c(key)) == crc else None


class Run(NamedTuple):
    """A run row: entries ``first..last`` of a ledger, whose records lie back to back in
    entry log ``log_id`` from ``offset`` on, with the record lengths ``lengths``."""

    first: int
    log_id: int
    offset: int
    lengths: tuple[int, ...]

    @property
    def last(self) -> int:
        """The run's highest entry id."""
        return self.first + len(self.lengths) - 1

    def location(self, entry_id: int) -> tuple[int, int, int]:
        """``(log id, offset, record length)`` of entry ``entry_id`` of the run."""
        index = entry_id - self.first
        return self.log_id, self.offset + sum(self.lengths[:index]), self.lengths[index]

    def piece(self, first: int, last: int) -> Run:
        """The run of entries ``first..last`` (inside this one), records where they are."""
        start = first - self.first
        return Run(
            first,
            self.log_id,
            self.offset + sum(self.lengths[:start]),
            self.lengths[start : last - self.first + 1],
        )


def run_row(
    ledger_id: int, first: int, log_id: int, offset: int, lengths: tuple[int, ...] | list[int]
) -> tuple[bytes, bytes]:
    """A run row ``(key, sealed value)`` (struct.error for ids or sizes out of range)."""
    key = ENTRY_KEY.pack(ledger_id, first)
    payload = RUN_HEAD.pack(log_id, offset) + struct.pack(f">{len(lengths)}I", *lengths)
    return key, ROW_CRC.pack(crc32c.crc32c(payload, crc32c.crc32c(key))) + payload


def entry_row(
    ledger_id: int, entry_id: int, log_id: int, offset: int, length: int
) -> tuple[bytes, bytes]:
    """The run row of one entry (also a format-2 entry row, byte for byte)."""
    return run_row(ledger_id, entry_id, log_id, offset, (length,))


def unseal_run_row(key: bytes, value: bytes) -> Run | None:
    """The run of a run row, or None when it fails its checks (checksum, sizes, ids)."""
    size = len(value)
    if len(key) != ENTRY_KEY.size or size < _RUN_VALUE_MIN or (size - _RUN_VALUE_MIN) % 4:
        return None
    count = (size - ROW_CRC.size - RUN_HEAD.size) // 4
    (crc,) = ROW_CRC.unpack_from(value)
    if crc32c.crc32c(value[ROW_CRC.size :], crc32c.crc32c(key)) != crc:
        return None
    ledger_id, first = ENTRY_KEY.unpack(key)
    if count > MAX_RUN_ENTRIES or ledger_id < 0 or first < 0 or first - 1 > _INT64_MAX - count:
        return None
    log_id, offset = RUN_HEAD.unpack_from(value, ROW_CRC.size)
    lengths = struct.unpack_from(f">{count}I", value, ROW_CRC.size + RUN_HEAD.size)
    return Run(first, log_id, offset, lengths)


def run_first(key: bytes) -> int | None:
    """The first entry id of a run row's key; None for a key of the wrong size (damage)."""
    return int(ENTRY_KEY.unpack(key)[1]) if len(key) == ENTRY_KEY.size else None


class IndexSummary(NamedTuple):
    """Which entries of a ledger the index holds: ``entries`` entries in ``runs`` run rows,
    the highest id ``last``.

    Invariant: the ledger has exactly ``runs`` run rows, holding ``entries`` entries
    between them, all with ids ``<= last``.
    """

    entries: int = 0
    last: int = -1
    runs: int = 0

    def plus(self, entries: int, highest: int, runs: int) -> IndexSummary:
        """The summary after ``entries`` more entries (highest id ``highest``) in ``runs``
        more run rows (either may be negative: runs split, merged or replaced)."""
        return IndexSummary(self.entries + entries, max(self.last, highest), self.runs + runs)


class LedgerRow(NamedTuple):
    """A ledger row: the index summary and the ledger state (``LedgerState.to_bytes``)."""

    summary: IndexSummary
    state: bytes


def pack_ledger_row(key: bytes, row: LedgerRow) -> bytes:
    """A ledger row's sealed value."""
    return seal(key, _SUMMARY.pack(*row.summary) + row.state)


def unpack_ledger_row(key: bytes, value: bytes) -> LedgerRow | None:
    """The ledger row, or None when it fails its checksum."""
    payload = unseal(key, value)
    if payload is None or len(payload) < _SUMMARY.size:
        return None
    count, last, runs = _SUMMARY.unpack_from(payload)
    if count < 0 or last < -1 or runs < 0 or runs > count:
        return None
    return LedgerRow(IndexSummary(count, last, runs), payload[_SUMMARY.size :])


def migrate_ledger_row(key: bytes, value: bytes) -> bytes | None:
    """A format-2 ledger row's value as a format-3 one (its entry rows are runs of one
    entry each, so it holds as many runs as entries); None when it fails its checksum."""
    payload = unseal(key, value)
    if payload is None or len(payload) < _SUMMARY_V2.size:
        return None
    count, last = _SUMMARY_V2.unpack_from(payload)
    summary = IndexSummary(count, last, count)
    return pack_ledger_row(key, LedgerRow(summary, payload[_SUMMARY_V2.size :]))


class Census(NamedTuple):
    """Row count and XOR of the key hashes of one table."""

    rows: int = 0
    digest: int = 0

    def plus(self, key: bytes) -> Census:
        """The census with ``key`` added."""
        return Census(self.rows + 1, self.digest ^ key_hash(key))

    def minus(self, key: bytes) -> Census:
        """The census with ``key`` removed."""
        return Census(self.rows - 1, self.digest ^ key_hash(key))


def key_hash(key: bytes) -> int:
    """A 64-bit hash of a key (a changed key changes the census digest)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") & _MASK64


def census_of(keys: list[bytes]) -> Census:
    """The census of a table holding exactly ``keys``."""
    census = Census()
    for key in keys:
        census = census.plus(key)
    return census


def pack_census(census: Census) -> bytes:
    """Payload of a census row (seal it under its key)."""
    return _CENSUS.pack(*census)


def unpack_census(payload: bytes) -> Census | None:
    """Inverse of :func:`pack_census`; None when malformed."""
    return Census(*_CENSUS.unpack(payload)) if len(payload) == _CENSUS.size else None


def pack_mark(file_seq: int, offset: int) -> bytes:
    """Payload of the journal mark row."""
    return _MARK.pack(file_seq, offset)


def unpack_mark(payload: bytes) -> tuple[int, int] | None:
    """Inverse of :func:`pack_mark`; None when malformed."""
    return _MARK.unpack(payload) if len(payload) == _MARK.size else None


def pack_next_log(log_id: int) -> bytes:
    """Payload of the next-entry-log-id row."""
    return _NEXT_LOG.pack(log_id)


def unpack_next_log(payload: bytes) -> int | None:
    """Inverse of :func:`pack_next_log`; None when malformed."""
    return int(_NEXT_LOG.unpack(payload)[0]) if len(payload) == _NEXT_LOG.size else None


__all__ = [
    "ENTRY_KEY",
    "FORMAT_KEY",
    "FORMAT_VERSION",
    "LEDGERS_CENSUS_KEY",
    "LEDGER_KEY",
    "LOGS_CENSUS_KEY",
    "LOG_KEY",
    "MARK_KEY",
    "MAX_RUN_ENTRIES",
    "META_KEYS",
    "NEXT_LOG_KEY",
    "PREVIOUS_FORMAT_VERSION",
    "ROW_CRC",
    "RUN_HEAD",
    "TOMBSTONES_KEY",
    "Census",
    "IndexSummary",
    "LedgerRow",
    "Run",
    "census_of",
    "entry_row",
    "format_payload",
    "key_hash",
    "migrate_ledger_row",
    "pack_census",
    "pack_ledger_row",
    "pack_mark",
    "pack_next_log",
    "run_first",
    "run_row",
    "seal",
    "unpack_census",
    "unpack_ledger_row",
    "unpack_mark",
    "unpack_next_log",
    "unseal",
    "unseal_run_row",
]

"""Self-checking rows of the bookie's LMDB index (format version 2). Pure, no I/O.

LMDB does not checksum its pages, so a flipped bit in ``index/data.mdb`` can change a
value, move a row to another key or hide rows behind a damaged branch page without any
error. A bookie must never turn such damage into an answer of absence (NO_SUCH_ENTRY,
NO_SUCH_LEDGER): ledger recovery counts those answers as proof that an entry was never
acknowledged. So every row carries its own checksum and the index keeps enough
redundancy to prove absence:

- Every value is *sealed*: ``crc32c(key + payload):u32 | payload``. The key is inside the
  checksum, so a row whose key bytes changed (moved to another key) fails too.
- A ledger row holds, besides the ledger state, the ledger's **index summary**: how many
  entry rows the index holds for it and the highest of their entry ids. Both change in
  the same transaction as the entry rows. An entry above the summary's highest id (and
  not in the write cache) is absent for sure; a miss at or below it is absence only once
  the ledger's rows are counted, each verified, and the count equals the summary.
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
FORMAT_VERSION = 2
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
# An entry row's value: crc, log id, offset, record length (the crc covers key + the rest).
_ENTRY_ROW = struct.Struct(">IIQI")
#: An entry row's key and location in one pack, and the row checksum: the parts of
#: :func:`entry_row`, for a loop that builds rows inline (the checkpoint's).
KEY_AND_LOCATION = struct.Struct(">qqIQI")
_SUMMARY = struct.Struct(">qq")  # entry rows held, highest entry id held (-1: none)
_MARK = struct.Struct(">QQ")
_CENSUS = struct.Struct(">QQ")
_NEXT_LOG = struct.Struct(">I")
_MASK64 = (1 << 64) - 1


def format_payload() -> bytes:
    """The payload of ``meta/format``."""
    return f"walog-bookie-index/{FORMAT_VERSION}".encode()


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


def entry_row(
    ledger_id: int, entry_id: int, log_id: int, offset: int, length: int
) -> tuple[bytes, bytes]:
    """An entry row ``(key, sealed value)``: the hot path of checkpoints, so one pack and
    one checksum over key + location (the same bytes :func:`seal` covers)."""
    both = KEY_AND_LOCATION.pack(ledger_id, entry_id, log_id, offset, length)
    return both[: ENTRY_KEY.size], ROW_CRC.pack(crc32c.crc32c(both)) + both[ENTRY_KEY.size :]


def unseal_entry_row(key: bytes, value: bytes) -> tuple[int, int, int] | None:
    """``(log id, offset, length)`` of an entry row, or None when it fails its checks."""
    if len(value) != _ENTRY_ROW.size:
        return None
    crc, log_id, offset, length = _ENTRY_ROW.unpack(value)
    if crc32c.crc32c(value[ROW_CRC.size :], crc32c.crc32c(key)) != crc:
        return None
    return log_id, offset, length


class IndexSummary(NamedTuple):
    """Which entries of a ledger the index holds: ``rows`` rows, the highest id ``last``.

    Invariant: the ledger has exactly ``rows`` entry rows, all with ids ``<= last``.
    """

    rows: int = 0
    last: int = -1

    def plus(self, added: int, highest: int) -> IndexSummary:
        """The summary after ``added`` new rows whose highest id is ``highest``."""
        return IndexSummary(self.rows + added, max(self.last, highest))


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
    count, last = _SUMMARY.unpack_from(payload)
    if count < 0 or last < -1:
        return None
    return LedgerRow(IndexSummary(count, last), payload[_SUMMARY.size :])


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
    "KEY_AND_LOCATION",
    "LEDGERS_CENSUS_KEY",
    "LEDGER_KEY",
    "LOGS_CENSUS_KEY",
    "LOG_KEY",
    "MARK_KEY",
    "META_KEYS",
    "NEXT_LOG_KEY",
    "ROW_CRC",
    "TOMBSTONES_KEY",
    "Census",
    "IndexSummary",
    "LedgerRow",
    "census_of",
    "entry_row",
    "format_payload",
    "key_hash",
    "pack_census",
    "pack_ledger_row",
    "pack_mark",
    "pack_next_log",
    "seal",
    "unpack_census",
    "unpack_ledger_row",
    "unpack_mark",
    "unpack_next_log",
    "unseal",
    "unseal_entry_row",
]

"""Journal record payloads: what each record a bookie journals says.

Every change a bookie acknowledges is one of these records first (the journal frames them;
see bookie/storage/journal.py). ADD carries whole entries (a client's batch, packed as it arrived:
no per-entry work on the journal path), so replay can rebuild the write cache;
KEY, FENCE, LAC and DELETE rebuild the ledger state. Integers are big endian.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple


class RecordKind(enum.IntEnum):
    """What a journal record says."""

    ADD = 1
    """Entries of one ledger: ledger, durability, then the entries packed as clients send
    them (``AddBatch.entries``: id, lac, digest, length and payload each)."""
    KEY = 2
    """A ledger's master key, written before its first entry or fence."""
    FENCE = 3
    """The ledger is fenced."""
    LAC = 4
    """An explicit LAC from an idle writer."""
    DELETE = 5
    """The ledger was deleted; earlier records of it are void."""


ADD_HEADER = struct.Struct(">BqB")
"""The fixed part of an ADD record: kind, ledger, durability (1: VOLATILE)."""
_ADD = ADD_HEADER
_LEDGER = struct.Struct(">Bq")
_LAC = struct.Struct(">Bqq")


_ADD_KIND = int(RecordKind.ADD)  # a plain int: packing an IntEnum member is slow


class Record(NamedTuple):
    """A decoded journal record (``data``: ADD's packed entries, KEY's master key)."""

    kind: RecordKind
    ledger_id: int
    lac: int = -1
    volatile: bool = False
    data: bytes = b""


def add_header(ledger_id: int, volatile: bool) -> bytes:
    """The fixed part of an ADD record; the packed entries follow it."""
    return _ADD.pack(_ADD_KIND, ledger_id, volatile)


def key_record(ledger_id: int, master_key: bytes) -> bytes:
    """A KEY record."""
    return _LEDGER.pack(RecordKind.KEY, ledger_id) + master_key


def fence_record(ledger_id: int) -> bytes:
    """A FENCE record."""
    return _LEDGER.pack(RecordKind.FENCE, ledger_id)


def lac_record(ledger_id: int, lac: int) -> bytes:
    """An explicit LAC record."""
    return _LAC.pack(RecordKind.LAC, ledger_id, lac)


def delete_record(ledger_id: int) -> bytes:
    """A DELETE record."""
    return _LEDGER.pack(RecordKind.DELETE, ledger_id)


def decode_record(payload: bytes) -> Record:
    """Decode a record payload; ValueError naming the problem when it is not one."""
    if not payload:
        raise ValueError("empty journal record")
    try:
        kind = RecordKind(payload[0])
        if kind is RecordKind.ADD:
            _, ledger_id, volatile = _ADD.unpack_from(payload)
            return Record(kind, ledger_id, volatile=bool(volatile), data=payload[_ADD.size :])
        if kind is RecordKind.LAC:
            _, ledger_id, lac = _LAC.unpack(payload)
            return Record(kind, ledger_id, lac=lac)
        _, ledger_id = _LEDGER.unpack_from(payload)
        if kind is RecordKind.KEY:
            return Record(kind, ledger_id, data=payload[_LEDGER.size :])
        if len(payload) != _LEDGER.size:
            raise ValueError(f"{kind.name} record of {len(payload)} bytes")
        return Record(kind, ledger_id)
    except struct.error as exc:
        raise ValueError(f"truncated journal record: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"unknown journal record: {exc}") from exc


__all__ = [
    "ADD_HEADER",
    "Record",
    "RecordKind",
    "add_header",
    "decode_record",
    "delete_record",
    "fence_record",
    "key_record",
    "lac_record",
]

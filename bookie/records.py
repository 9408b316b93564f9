"""Journal record payloads: what each record a bookie journals says.

Every change a bookie acknowledges is one of these records first (the journal frames them;
see bookie/journal.py). ADD carries the whole entry, so replay can rebuild the write cache;
KEY, FENCE, LAC and DELETE rebuild the ledger state. Integers are big endian.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple


class RecordKind(enum.IntEnum):
    """What a journal record says."""

    ADD = 1
    """An entry: ledger, entry, lac, digest, durability, then the payload."""
    KEY = 2
    """A ledger's master key, written before its first entry or fence."""
    FENCE = 3
    """The ledger is fenced."""
    LAC = 4
    """An explicit LAC from an idle writer."""
    DELETE = 5
    """The ledger was deleted; earlier records of it are void."""


_ADD = struct.Struct(">BqqqIB")
_LEDGER = struct.Struct(">Bq")
_LAC = struct.Struct(">Bqq")


class Record(NamedTuple):
    """A decoded journal record."""

    kind: RecordKind
    ledger_id: int
    entry_id: int = -1
    lac: int = -1
    digest: int = 0
    volatile: bool = False
    data: bytes = b""


def add_header(ledger_id: int, entry_id: int, lac: int, digest: int, volatile: bool) -> bytes:
    """The fixed part of an ADD record; the entry's payload follows it."""
    return _ADD.pack(RecordKind.ADD, ledger_id, entry_id, lac, digest, volatile)


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
            _, ledger_id, entry_id, lac, digest, volatile = _ADD.unpack_from(payload)
            return Record(
                kind, ledger_id, entry_id, lac, digest, bool(volatile), payload[_ADD.size :]
            )
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
    "Record",
    "RecordKind",
    "add_header",
    "decode_record",
    "delete_record",
    "fence_record",
    "key_record",
    "lac_record",
]

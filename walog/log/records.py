"""How log records are packed into ledger entries (entry format, version 1).

A ledger entry written by a log writer holds one or more records. Layout, big-endian:

```
offset  size  field
0       1     format version, 1
1       4     record count N (>= 1)
then N times:
        8     timestamp: writer's wall clock, IEEE-754 float64 seconds since the epoch
        4     payload length L
        L     payload
```

Nothing follows the last record. The entry's integrity is the ledger's business (every entry
carries a CRC32C digest); this format only refuses entries it cannot parse. A reader that
finds a version it does not know raises :class:`RecordFormatError` instead of guessing.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from walog.errors import WalogError

FORMAT_VERSION = 1
_HEADER = struct.Struct(">BI")
_RECORD = struct.Struct(">dI")
HEADER_BYTES = _HEADER.size
"""Bytes of an entry's header."""
RECORD_OVERHEAD_BYTES = _RECORD.size
"""Bytes each record adds besides its payload."""


class RecordFormatError(WalogError):
    """An entry of a log does not hold records in a format this version can read."""


def encoded_size(payload_sizes_total: int, count: int) -> int:
    """Bytes of an entry holding ``count`` records whose payloads total the given size."""
    return HEADER_BYTES + count * RECORD_OVERHEAD_BYTES + payload_sizes_total


def encode_records(records: list[tuple[float, bytes]]) -> bytes:
    """Pack ``(timestamp, payload)`` pairs into one entry.

    Raises:
        ValueError: no records, or a payload too large for the 32-bit length.
    """
    if not records:
        raise ValueError("an entry holds at least one record")
    parts = [_HEADER.pack(FORMAT_VERSION, len(records))]
    for timestamp, payload in records:
        if len(payload) > 0xFFFFFFFF:
            raise ValueError(f"record of {len(payload)} bytes exceeds the 4 GiB format limit")
        parts.append(_RECORD.pack(timestamp, len(payload)))
        parts.append(payload)
    return b"".join(parts)


def decode_records(entry: bytes) -> list[tuple[float, bytes]]:
    """Unpack an entry into its ``(timestamp, payload)`` pairs, in slot order.

    Raises:
        RecordFormatError: unknown version, truncated or trailing bytes, zero records.
    """
    return list(iter_records(entry))


def iter_records(entry: bytes) -> Iterator[tuple[float, bytes]]:
    """Like :func:`decode_records`, lazily; the checks run as it goes and at its end."""
    for timestamp, payload in iter_record_views(entry):
        yield timestamp, bytes(payload)


def iter_record_views(entry: bytes | memoryview) -> Iterator[tuple[float, memoryview]]:
    """Like :func:`iter_records`, but each payload is a view into ``entry`` (no copy).

    For readers that gather many payloads into one buffer: copying each payload into its
    own ``bytes`` first would double the copying.
    """
    view = memoryview(entry)
    if len(view) < HEADER_BYTES:
        raise RecordFormatError(f"log entry of {len(view)} bytes is shorter than its header")
    version, count = _HEADER.unpack_from(view, 0)
    if version != FORMAT_VERSION:
        raise RecordFormatError(
            f"log entry format version {version} is not supported "
            f"(this walog reads version {FORMAT_VERSION}); upgrade the reader"
        )
    if count == 0:
        raise RecordFormatError("log entry holds zero records")
    offset = HEADER_BYTES
    size = len(view)
    unpack = _RECORD.unpack_from
    for slot in range(count):
        if offset + RECORD_OVERHEAD_BYTES > size:
            raise RecordFormatError(f"log entry truncated in the header of record {slot}")
        timestamp, length = unpack(view, offset)
        offset += RECORD_OVERHEAD_BYTES
        if offset + length > size:
            raise RecordFormatError(f"log entry truncated in the payload of record {slot}")
        yield timestamp, view[offset : offset + length]
        offset += length
    if offset != size:
        raise RecordFormatError(f"log entry has {size - offset} bytes after its records")


class RecordBatch:
    """Records gathered for one entry, with the size the entry will have.

    Pure bookkeeping: the writer decides when to send; this says whether one more record
    fits under the limits.
    """

    __slots__ = ("_max_bytes", "_max_records", "payload_bytes", "records")

    def __init__(self, max_bytes: int, max_records: int) -> None:
        if max_bytes <= HEADER_BYTES + RECORD_OVERHEAD_BYTES:
            raise ValueError(f"max entry bytes {max_bytes} leaves no room for a record")
        if max_records < 1:
            raise ValueError(f"max records per entry must be >= 1, got {max_records}")
        self._max_bytes = max_bytes
        self._max_records = max_records
        self.records: list[tuple[float, bytes]] = []
        self.payload_bytes = 0

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload a record may have (alone in its entry)."""
        return self._max_bytes - HEADER_BYTES - RECORD_OVERHEAD_BYTES

    def __len__(self) -> int:
        return len(self.records)

    @property
    def size(self) -> int:
        """Bytes of the entry these records encode to."""
        return encoded_size(self.payload_bytes, len(self.records))

    def fits(self, payload_len: int) -> bool:
        """True when a record of this payload size can join without passing a limit."""
        if len(self.records) >= self._max_records:
            return False
        return self.size + RECORD_OVERHEAD_BYTES + payload_len <= self._max_bytes

    @property
    def full(self) -> bool:
        """True when not even an empty record fits any more."""
        return not self.fits(0)

    def add(self, timestamp: float, payload: bytes) -> int:
        """Add a record; return its slot. The caller checked :meth:`fits`."""
        self.records.append((timestamp, payload))
        self.payload_bytes += len(payload)
        return len(self.records) - 1

    def encode(self) -> bytes:
        """The entry bytes."""
        return encode_records(self.records)


__all__ = [
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "RecordBatch",
    "RecordFormatError",
    "decode_records",
    "encode_records",
    "encoded_size",
    "iter_record_views",
    "iter_records",
]

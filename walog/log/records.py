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
from walog.format_versions import check_version

FORMAT_VERSION = 1
_HEADER = struct.Struct(">BI")
_RECORD = struct.Struct(">dI")
HEADER_BYTES = _HEADER.size
"""Bytes of an entry's header."""
RECORD_OVERHEAD_BYTES = _RECORD.size
"""Bytes each record adds besides its payload."""
_MAX_PAYLOAD = 0xFFFFFFFF  # the 32-bit payload length
_pack_record = _RECORD.pack


class RecordFormatError(WalogError):
    """An entry of a log does not hold records in a format this version can read."""


def record_bytes(data: object) -> bytes:
    """A record's payload as ``bytes`` (a copy of a bytes-like ``data``).

    Raises:
        TypeError: ``data`` is a ``str`` or not bytes-like.
    """
    if isinstance(data, str):
        raise TypeError("log records are bytes, not str; encode the text first")
    try:
        return bytes(memoryview(data))  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"log records are bytes-like (bytes, bytearray, memoryview), got {type(data).__name__}"
        ) from None


def encode_records(records: list[tuple[float, bytes]]) -> bytes:
    """Pack ``(timestamp, payload)`` pairs into one entry.

    Raises:
        ValueError: no records, or a payload too large for the 32-bit length.
    """
    if not records:
        raise ValueError("an entry holds at least one record")
    parts = [_HEADER.pack(FORMAT_VERSION, len(records))]
    for timestamp, payload in records:
        if len(payload) > _MAX_PAYLOAD:
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
    check_version("a log entry", version, FORMAT_VERSION, RecordFormatError)
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


def record_timestamps(entry: bytes | memoryview) -> list[float]:
    """The timestamps of an entry's records, in slot order (payloads are not copied).

    Raises:
        RecordFormatError: as :func:`decode_records`.
    """
    return [timestamp for timestamp, _ in iter_record_views(entry)]


def entry_time_range(entry: bytes | memoryview) -> tuple[float, float]:
    """The timestamps of an entry's first and last records.

    Raises:
        RecordFormatError: as :func:`decode_records`.
    """
    stamps = record_timestamps(entry)
    return stamps[0], stamps[-1]


class RecordBatch:
    """Records gathered for one entry, encoded as they arrive.

    Pure bookkeeping: the writer decides when to send; this says whether one more record
    fits under the limits. Each record's 12-byte header is packed when it is added, so
    :meth:`encode` only has to prepend the entry header and join (one copy of the payloads).
    The writer calls :meth:`fits` and :meth:`add` once per record: they are kept to a few
    integer operations.

    Attributes:
        count: records added so far.
        size: bytes of the entry these records encode to.
    """

    __slots__ = ("_max_bytes", "_max_records", "_parts", "count", "size")

    def __init__(self, max_bytes: int, max_records: int) -> None:
        if max_bytes <= HEADER_BYTES + RECORD_OVERHEAD_BYTES:
            raise ValueError(f"max entry bytes {max_bytes} leaves no room for a record")
        if max_bytes > HEADER_BYTES + RECORD_OVERHEAD_BYTES + _MAX_PAYLOAD:
            # Keeps every payload that fits within the format's 32-bit length.
            raise ValueError(f"max entry bytes {max_bytes} exceeds the 4 GiB format limit")
        if max_records < 1:
            raise ValueError(f"max records per entry must be >= 1, got {max_records}")
        self._max_bytes = max_bytes
        self._max_records = max_records
        # parts[0] is the entry header, packed by encode() once the count is final; then a
        # record header and a payload per record, in slot order.
        self._parts: list[bytes] = [b""]
        self.count = 0
        self.size = HEADER_BYTES

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload a record may have (alone in its entry)."""
        return self._max_bytes - HEADER_BYTES - RECORD_OVERHEAD_BYTES

    def __len__(self) -> int:
        return self.count

    @property
    def payload_bytes(self) -> int:
        """Bytes of the payloads alone."""
        return self.size - HEADER_BYTES - self.count * RECORD_OVERHEAD_BYTES

    def fits(self, payload_len: int) -> bool:
        """True when a record of this payload size can join without passing a limit."""
        return (
            self.count < self._max_records
            and self.size + RECORD_OVERHEAD_BYTES + payload_len <= self._max_bytes
        )

    @property
    def full(self) -> bool:
        """True when not even an empty record fits any more."""
        return not self.fits(0)

    def add(self, timestamp: float, payload: bytes) -> bool:
        """Add a record in the next slot (the caller checked :meth:`fits`).

        Returns:
            True when the batch is full afterwards (not even an empty record fits), so the
            caller can send it without asking again.
        """
        parts = self._parts
        parts.append(_pack_record(timestamp, len(payload)))
        parts.append(payload)
        self.count += 1
        self.size += RECORD_OVERHEAD_BYTES + len(payload)
        return (
            self.count >= self._max_records or self.size + RECORD_OVERHEAD_BYTES > self._max_bytes
        )

    def encode(self) -> bytes:
        """The entry bytes.

        Raises:
            ValueError: the batch holds no record.
        """
        if not self.count:
            raise ValueError("an entry holds at least one record")
        self._parts[0] = _HEADER.pack(FORMAT_VERSION, self.count)
        return b"".join(self._parts)


__all__ = [
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "RecordBatch",
    "RecordFormatError",
    "decode_records",
    "encode_records",
    "entry_time_range",
    "iter_record_views",
    "iter_records",
    "record_bytes",
    "record_timestamps",
]

"""How log records are packed into ledger entries (entry formats 1 and 2).

A ledger entry written by a log writer holds one or more records. Format 1, big-endian:

```
offset  size  field
0       1     format version, 1
1       4     record count N (>= 1)
then N times:
        8     timestamp: writer's wall clock, IEEE-754 float64 seconds since the epoch
        4     payload length L
        L     payload
```

Format 2 carries a record's producer session (docs/logs.md, "Producer sessions"): each
record may name its producer and its sequence number there. Only entries holding such a
record need it; a writer without a producer writes format 1, byte for byte as before.

```
offset  size  field
0       1     format version, 2
1       4     record count N (>= 1)
then N times:
        8     timestamp, as in format 1
        1     producer name length P (0: the record has no producer)
        P     producer name, UTF-8
        8     sequence number, unsigned (only when P > 0)
        4     payload length L
        L     payload
```

Nothing follows the last record. The entry's integrity is the ledger's business (every entry
carries a CRC32C digest); this format only refuses entries it cannot parse. A reader that
finds a version it does not know raises :class:`RecordFormatError` instead of guessing (a
release that reads format 1 only refuses a format-2 entry that way).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Protocol

from walog._compiled import compiled_module
from walog.errors import WalogError
from walog.format_versions import check_version

FORMAT_VERSION = 1
"""The format of entries whose records name no producer (what writers without one write)."""
TAGGED_FORMAT_VERSION = 2
"""The format of entries holding records of producer sessions; the newest this reads."""
_HEADER = struct.Struct(">BI")
_RECORD = struct.Struct(">dI")
_RECORD2_PLAIN = struct.Struct(">dxI")  # format 2, no producer: a zero name length
_STAMP = struct.Struct(">d")
_SEQ_LENGTH = struct.Struct(">QI")
HEADER_BYTES = _HEADER.size
"""Bytes of an entry's header."""
RECORD_OVERHEAD_BYTES = _RECORD.size
"""Bytes each record adds besides its payload (format 1)."""
TAGGED_OVERHEAD_BYTES = _STAMP.size + 1 + _SEQ_LENGTH.size
"""Bytes a record of a producer adds in format 2 besides its payload and producer name."""
MAX_PRODUCER_BYTES = 255
"""A producer's name is at most this many bytes of UTF-8."""
MAX_SEQ = 2**63 - 1
"""The largest sequence number a record can carry."""
_MAX_PAYLOAD = 0xFFFFFFFF  # the 32-bit payload length
_pack_record = _RECORD.pack
_pack_plain2 = _RECORD2_PLAIN.pack

Tag = tuple[str, int] | None
"""A record's producer and sequence number, None when it has none."""


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


def producer_prefix(producer: object) -> bytes:
    """A producer name's bytes in a format-2 record: its length, then its UTF-8.

    Raises:
        TypeError: ``producer`` is not a ``str``.
        ValueError: empty, or longer than :data:`MAX_PRODUCER_BYTES` bytes of UTF-8.
    """
    if not isinstance(producer, str):
        raise TypeError(f"producer must be a str, got {type(producer).__name__} {producer!r}")
    name = producer.encode()
    if not name:
        raise ValueError("producer is empty: name the producer (e.g. the service's id)")
    if len(name) > MAX_PRODUCER_BYTES:
        raise ValueError(
            f"producer {producer[:40]!r}... is {len(name)} bytes of UTF-8; "
            f"at most {MAX_PRODUCER_BYTES}"
        )
    return bytes((len(name),)) + name


def encode_records(records: list[tuple[float, bytes]], tags: list[Tag] | None = None) -> bytes:
    """Pack ``(timestamp, payload)`` pairs into one entry; with ``tags`` (one per record,
    None for a record without a producer) holding any producer, in format 2.

    Raises:
        ValueError: no records, a payload too large for the 32-bit length, or a tag that
            no record can carry.
    """
    if not records:
        raise ValueError("an entry holds at least one record")
    if tags is not None and any(tag is not None for tag in tags):
        if len(tags) != len(records):
            raise ValueError(f"{len(tags)} tags for {len(records)} records")
        batch = TaggedRecordBatch(_MAX_ENTRY, len(records))
        for (timestamp, payload), tag in zip(records, tags, strict=True):
            _check_payload(payload)
            if tag is None:
                batch.add(timestamp, payload)
            else:
                batch.add_tagged(timestamp, payload, producer_prefix(tag[0]), tag[1])
        return batch.encode()
    parts = [_HEADER.pack(FORMAT_VERSION, len(records))]
    for timestamp, payload in records:
        _check_payload(payload)
        parts.append(_RECORD.pack(timestamp, len(payload)))
        parts.append(payload)
    return b"".join(parts)


def _check_payload(payload: bytes) -> None:
    if len(payload) > _MAX_PAYLOAD:
        raise ValueError(f"record of {len(payload)} bytes exceeds the 4 GiB format limit")


def check_seq(seq: object) -> int:
    """``seq`` when a record can carry it as its sequence number.

    Raises:
        TypeError: not an ``int`` (a ``bool`` is not one either).
        ValueError: negative, or over :data:`MAX_SEQ`.
    """
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise TypeError(f"seq must be an int, got {type(seq).__name__} {seq!r}")
    if seq < 0:
        raise ValueError(f"seq must be >= 0, got {seq}")
    if seq > MAX_SEQ:
        raise ValueError(f"seq {seq} is over the largest a record carries, {MAX_SEQ}")
    return seq


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


def is_tagged(entry: bytes | memoryview) -> bool:
    """True when ``entry`` is in format 2 (its records may name producers)."""
    return len(entry) > 0 and entry[0] == TAGGED_FORMAT_VERSION


def iter_record_views(entry: bytes | memoryview) -> Iterator[tuple[float, memoryview]]:
    """Like :func:`iter_records`, but each payload is a view into ``entry`` (no copy).

    For readers that gather many payloads into one buffer: copying each payload into its
    own ``bytes`` first would double the copying. Producers of format-2 records are skipped
    (:func:`iter_tagged_views` yields them).
    """
    view = memoryview(entry)
    count = _check_header(view)
    if view[0] == TAGGED_FORMAT_VERSION:
        for timestamp, payload, _tag in _iter_tagged(view, count):
            yield timestamp, payload
        return
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


def iter_tagged_views(entry: bytes | memoryview) -> Iterator[tuple[float, memoryview, Tag]]:
    """Like :func:`iter_record_views`, with each record's producer and sequence number
    (None for a record without: every record of a format-1 entry)."""
    view = memoryview(entry)
    count = _check_header(view)
    if view[0] == TAGGED_FORMAT_VERSION:
        yield from _iter_tagged(view, count)
        return
    for timestamp, payload in iter_record_views(view):
        yield timestamp, payload, None


def decode_tagged(entry: bytes | memoryview) -> list[tuple[float, bytes, Tag]]:
    """An entry's ``(timestamp, payload, tag)`` records, in slot order (any format).

    Raises:
        RecordFormatError: as :func:`decode_records`.
    """
    return [(stamp, bytes(payload), tag) for stamp, payload, tag in iter_tagged_views(entry)]


def _check_header(view: memoryview) -> int:
    """The record count of an entry whose header is valid."""
    if len(view) < HEADER_BYTES:
        raise RecordFormatError(f"log entry of {len(view)} bytes is shorter than its header")
    version, count = _HEADER.unpack_from(view, 0)
    check_version("a log entry", version, TAGGED_FORMAT_VERSION, RecordFormatError)
    if count == 0:
        raise RecordFormatError("log entry holds zero records")
    return int(count)


def _iter_tagged(view: memoryview, count: int) -> Iterator[tuple[float, memoryview, Tag]]:
    offset = HEADER_BYTES
    size = len(view)
    for slot in range(count):
        if offset + _STAMP.size + 1 > size:
            raise RecordFormatError(f"log entry truncated in the header of record {slot}")
        (timestamp,) = _STAMP.unpack_from(view, offset)
        name_length = view[offset + _STAMP.size]
        offset += _STAMP.size + 1
        tag: Tag = None
        if name_length:
            if offset + name_length + _SEQ_LENGTH.size > size:
                raise RecordFormatError(f"log entry truncated in the header of record {slot}")
            try:
                producer = bytes(view[offset : offset + name_length]).decode()
            except UnicodeDecodeError as exc:
                raise RecordFormatError(
                    f"log entry's record {slot} names a producer that is not UTF-8"
                ) from exc
            offset += name_length
            seq, length = _SEQ_LENGTH.unpack_from(view, offset)
            offset += _SEQ_LENGTH.size
            tag = (producer, seq)
        else:
            if offset + 4 > size:
                raise RecordFormatError(f"log entry truncated in the header of record {slot}")
            (length,) = struct.unpack_from(">I", view, offset)
            offset += 4
        if offset + length > size:
            raise RecordFormatError(f"log entry truncated in the payload of record {slot}")
        yield timestamp, view[offset : offset + length], tag
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


_MAX_ENTRY = HEADER_BYTES + RECORD_OVERHEAD_BYTES + _MAX_PAYLOAD
_TAGGED_PACKS: dict[int, Callable[..., bytes]] = {}
"""A record header's packer per length of its producer prefix (one struct call a record)."""


class RecordBatch:
    """Records gathered for one entry, encoded as they arrive (entry format 1).

    Pure bookkeeping: the writer decides when to send; this says whether one more record
    fits under the limits. Each record's 12-byte header is packed when it is added, so
    :meth:`encode` only has to prepend the entry header and join (one copy of the payloads).
    The writer calls :meth:`fits` and :meth:`add` once per record: they are kept to a few
    integer operations. :class:`TaggedRecordBatch` makes format-2 entries
    (:func:`new_batch` picks by version).

    Attributes:
        count: records added so far.
        size: bytes of the entry these records encode to.
        version: the entry format it encodes to.
    """

    __slots__ = ("_max_bytes", "_max_records", "_parts", "count", "size")

    version = FORMAT_VERSION

    def __init__(self, max_bytes: int, max_records: int) -> None:
        if max_bytes <= HEADER_BYTES + RECORD_OVERHEAD_BYTES:
            raise ValueError(f"max entry bytes {max_bytes} leaves no room for a record")
        if max_bytes > _MAX_ENTRY:
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
        """The largest payload a record without a producer may have (alone in its entry)."""
        return self._max_bytes - HEADER_BYTES - RECORD_OVERHEAD_BYTES

    def max_tagged_payload_bytes(self, prefix: bytes) -> int:
        """The largest payload a record of the producer of ``prefix`` (its
        :func:`producer_prefix`) may have, alone in a format-2 entry of this limit."""
        return self._max_bytes - HEADER_BYTES - TAGGED_OVERHEAD_BYTES - len(prefix) + 1

    def __len__(self) -> int:
        return self.count

    @property
    def payload_bytes(self) -> int:
        """Bytes of the payloads alone."""
        return self.size - HEADER_BYTES - sum(len(p) for p in self._parts[1::2])

    def fits(self, payload_len: int) -> bool:
        """True when a record of this payload size can join without passing a limit."""
        return (
            self.count < self._max_records
            and self.size + RECORD_OVERHEAD_BYTES + payload_len <= self._max_bytes
        )

    def fits_tagged(self, payload_len: int, prefix: bytes) -> bool:
        """:meth:`fits` for a record of the producer of ``prefix``; never in format 1."""
        return False

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

    def add_tagged(self, timestamp: float, payload: bytes, prefix: bytes, seq: int) -> bool:
        """Add a record of the producer of ``prefix`` (its :func:`producer_prefix`) with
        sequence number ``seq``, as :meth:`add`: only in a :class:`TaggedRecordBatch`.

        Raises:
            ValueError: always (format 1 carries no producer).
        """
        raise ValueError("a record of a producer needs an entry of format 2")

    def encode(self) -> bytes:
        """The entry bytes.

        Raises:
            ValueError: the batch holds no record.
        """
        if not self.count:
            raise ValueError("an entry holds at least one record")
        self._parts[0] = _HEADER.pack(self.version, self.count)
        return b"".join(self._parts)


class TaggedRecordBatch(RecordBatch):
    """A :class:`RecordBatch` of format 2: it takes records of producers
    (:meth:`add_tagged`); its records without one cost a byte more than in format 1."""

    __slots__ = ()

    version = TAGGED_FORMAT_VERSION

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload a record without a producer may have (alone in its entry)."""
        return self._max_bytes - HEADER_BYTES - _RECORD2_PLAIN.size

    def fits(self, payload_len: int) -> bool:
        """True when a record without a producer of this payload size can join."""
        return (
            self.count < self._max_records
            and self.size + _RECORD2_PLAIN.size + payload_len <= self._max_bytes
        )

    def fits_tagged(self, payload_len: int, prefix: bytes) -> bool:
        """:meth:`fits` for a record of the producer of ``prefix``."""
        return (
            self.count < self._max_records
            and self.size + TAGGED_OVERHEAD_BYTES - 1 + len(prefix) + payload_len <= self._max_bytes
        )

    def add(self, timestamp: float, payload: bytes) -> bool:
        """Add a record without a producer, as :meth:`RecordBatch.add`."""
        parts = self._parts
        parts.append(_pack_plain2(timestamp, len(payload)))
        parts.append(payload)
        self.count += 1
        self.size += _RECORD2_PLAIN.size + len(payload)
        return self.count >= self._max_records or self.size + _RECORD2_PLAIN.size > self._max_bytes

    def add_tagged(self, timestamp: float, payload: bytes, prefix: bytes, seq: int) -> bool:
        """Add a record of the producer of ``prefix`` with sequence number ``seq`` (the
        caller checked :meth:`fits_tagged` and ``seq``), as :meth:`add`."""
        pack = _TAGGED_PACKS.get(len(prefix))
        if pack is None:
            pack = _TAGGED_PACKS[len(prefix)] = struct.Struct(f">d{len(prefix)}sQI").pack
        parts = self._parts
        parts.append(pack(timestamp, prefix, seq, len(payload)))
        parts.append(payload)
        self.count += 1
        self.size += TAGGED_OVERHEAD_BYTES - 1 + len(prefix) + len(payload)
        return self.count >= self._max_records or self.size + _RECORD2_PLAIN.size > self._max_bytes


class EntryBatch(Protocol):
    """What a log writer gathers one entry's records in: a :class:`RecordBatch`, a
    :class:`TaggedRecordBatch` or their compiled twin (``walog.log._fastrecords.Batch``),
    which :func:`new_batch` picks."""

    @property
    def count(self) -> int:
        """Records added so far."""

    @property
    def size(self) -> int:
        """Bytes of the entry these records encode to."""

    @property
    def version(self) -> int:
        """The entry format it encodes to."""

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload a record without a producer may have (alone in its entry)."""

    @property
    def payload_bytes(self) -> int:
        """Bytes of the payloads alone."""

    @property
    def full(self) -> bool:
        """True when not even an empty record fits any more."""

    def __len__(self) -> int: ...

    def max_tagged_payload_bytes(self, prefix: bytes, /) -> int:
        """The largest payload a record of the producer of ``prefix`` may have."""

    def fits(self, payload_len: int, /) -> bool:
        """True when a record without a producer of this payload size can join."""

    def fits_tagged(self, payload_len: int, prefix: bytes, /) -> bool:
        """:meth:`fits` for a record of the producer of ``prefix``; never in format 1."""

    def add(self, timestamp: float, payload: bytes, /) -> bool:
        """Add a record without a producer; True when the batch is full afterwards."""

    def add_tagged(self, timestamp: float, payload: bytes, prefix: bytes, seq: int, /) -> bool:
        """Add a record of the producer of ``prefix`` with sequence number ``seq``."""

    def encode(self) -> bytes:
        """The entry bytes."""


_fast = compiled_module("walog.log._fastrecords")
COMPILED = _fast is not None
"""True when :func:`new_batch` gives the compiled batch (walog/log/_fastrecords.c): the same
bytes at a fraction of the CPU per record."""


def new_batch(max_bytes: int, max_records: int, version: int = FORMAT_VERSION) -> EntryBatch:
    """A batch of entry format ``version`` (1: as :class:`RecordBatch`, or 2: as
    :class:`TaggedRecordBatch`), compiled unless ``WALOG_PURE_PYTHON`` asks for pure
    Python or the extension is not built.

    Raises:
        ValueError: an unknown version, or limits that leave no room for a record.
    """
    if version not in (FORMAT_VERSION, TAGGED_FORMAT_VERSION):
        raise ValueError(f"entry format version must be 1 or 2, got {version!r}")
    if _fast is not None:
        compiled: EntryBatch = _fast.Batch(max_bytes, max_records, version)
        return compiled
    if version == FORMAT_VERSION:
        return RecordBatch(max_bytes, max_records)
    return TaggedRecordBatch(max_bytes, max_records)


__all__ = [
    "COMPILED",
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "MAX_PRODUCER_BYTES",
    "MAX_SEQ",
    "RECORD_OVERHEAD_BYTES",
    "TAGGED_FORMAT_VERSION",
    "TAGGED_OVERHEAD_BYTES",
    "EntryBatch",
    "RecordBatch",
    "RecordFormatError",
    "Tag",
    "TaggedRecordBatch",
    "check_seq",
    "decode_records",
    "decode_tagged",
    "encode_records",
    "entry_time_range",
    "is_tagged",
    "iter_record_views",
    "iter_records",
    "iter_tagged_views",
    "new_batch",
    "producer_prefix",
    "record_bytes",
    "record_timestamps",
]

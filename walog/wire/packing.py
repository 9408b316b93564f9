"""The packed entry format of the bookie protocol: many entries in one bytes value.

Adds travel packed (``AddBatch.entries`` in the proto) and bookies journal them packed as
they arrived. Each entry is a 24-byte big-endian header ``entry_id:int64 lac:int64
digest:uint32 length:uint32`` followed by ``length`` payload bytes. Pure: no I/O, used by
the writer, the transport and the bookie alike.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable
from typing import NamedTuple, Protocol

ENTRY_HEADER = struct.Struct(">qqII")
"""The header of each packed entry: entry id, lac, digest, payload length."""


class PackedEntry(NamedTuple):
    """An entry unpacked from a batch, as it travels through the bookie (from the add path
    to the journal, the write cache and replay)."""

    entry_id: int
    """The entry's id."""
    lac: int
    """The LAC the entry carries."""
    digest: int
    """CRC32C of the digest header and the payload (:func:`walog.wire.digest.entry_digest`)."""
    data: bytes
    """The payload: a slice of the batch (bytes, or what the batch was)."""


class OutgoingEntry(Protocol):
    """An entry to send: its id, the LAC it carries, its payload and digest."""

    @property
    def entry_id(self) -> int:
        """The entry's id."""

    @property
    def lac(self) -> int:
        """The LAC piggybacked on the entry (covered by the digest)."""

    @property
    def data(self) -> bytes:
        """The payload."""

    @property
    def digest(self) -> int:
        """The entry digest (walog/wire/digest.py)."""


class PackedEntries(NamedTuple):
    """Entries of one ledger packed once, to be sent to any number of bookies."""

    entry_ids: list[int]
    blob: bytes
    payload_bytes: int

    @classmethod
    def pack(cls, entries: Iterable[OutgoingEntry]) -> PackedEntries:
        """Pack ``entries`` in order."""
        chunks = cls.chunks(entries, max_entries=sys.maxsize, max_bytes=sys.maxsize)
        return chunks[0] if chunks else cls([], b"", 0)

    @classmethod
    def chunks(
        cls, entries: Iterable[OutgoingEntry], *, max_entries: int, max_bytes: int
    ) -> list[PackedEntries]:
        """Pack ``entries`` in order into chunks of at most ``max_entries`` entries, each
        closed once it holds ``max_bytes`` of payload (so that each fits in a frame)."""
        chunks: list[PackedEntries] = []
        parts: list[bytes] = []
        entry_ids: list[int] = []
        size = 0
        header = ENTRY_HEADER.pack
        for entry in entries:
            data = entry.data
            entry_ids.append(entry.entry_id)
            parts.append(header(entry.entry_id, entry.lac, entry.digest, len(data)))
            parts.append(data)
            size += len(data)
            if len(entry_ids) >= max_entries or size >= max_bytes:
                chunks.append(cls(entry_ids, b"".join(parts), size))
                parts, entry_ids, size = [], [], 0
        if entry_ids:
            chunks.append(cls(entry_ids, b"".join(parts), size))
        return chunks


def unpack_entries(blob: bytes) -> tuple[list[PackedEntry], str | None]:
    """The entries packed in ``blob``, and what is wrong with its tail (None when nothing).

    Entries before a malformed tail (a short header or a length past the end) are returned,
    so they can be answered; the tail cannot be.
    """
    entries: list[PackedEntry] = []
    append = entries.append
    make = PackedEntry._make
    unpack = ENTRY_HEADER.unpack_from
    head = ENTRY_HEADER.size
    end = len(blob)
    offset = 0
    while offset < end:
        if end - offset < head:
            return entries, f"{end - offset} stray bytes after {len(entries)} entries"
        entry_id, lac, digest, length = unpack(blob, offset)
        start = offset + head
        offset = start + length
        if offset > end:
            return entries, f"entry {entry_id} claims {length} bytes, {end - start} left"
        append(make((entry_id, lac, digest, blob[start:offset])))
    return entries, None


__all__ = ["ENTRY_HEADER", "OutgoingEntry", "PackedEntries", "PackedEntry", "unpack_entries"]

"""The client's codec of the bookie protocol: frames, status codes, digest checks,
and the translation of ``grpc.RpcError`` into walog errors (the one place it happens).

No I/O here: :mod:`walog.transport.add_stream` and :mod:`walog.transport.network` use these.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Sequence

import grpc
import grpc.aio

from walog._loggers import get_logger
from walog.errors import (
    BookieCallUnsupportedError,
    BookieUnavailableError,
    UnauthorizedError,
    WalogError,
)
from walog.transport.base import BatchCallback, StoredEntry
from walog.transport.native import NativeCallError
from walog.wire.digest import entry_digest
from walog.wire.packing import PackedEntries
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.status import Status

log = get_logger("walog.transport")


class PendingBatch:
    """Adds of one ledger for one callback waiting for a frame (see ``AddBatch``): packed
    pieces in ``parts``, encoded when the frame is built; or, for a large batch, already
    encoded (``encoded``) with its ``batch_id``, the same bytes for every bookie.

    ``entry_ids`` are those not answered yet; ``batch_id`` is set by the time it is sent.
    """

    __slots__ = (
        "batch_id",
        "callback",
        "durability",
        "encoded",
        "entry_ids",
        "ledger_id",
        "master_key",
        "packed",
        "parts",
        "queued_at",
        "recovery",
        "size",
    )

    def __init__(
        self,
        ledger_id: int,
        master_key: bytes,
        recovery: bool,
        durability: int,
        callback: BatchCallback,
        queued_at: float,
    ) -> None:
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.recovery = recovery
        self.durability = durability
        self.callback = callback
        self.queued_at = queued_at
        self.parts: list[bytes] = []
        self.packed: PackedEntries | None = None
        """The packed adds, while they are the batch's only part: then its encoding is
        shared with the other bookies' streams (see :meth:`BatchEncoder.shared`)."""
        self.entry_ids: list[int] = []
        self.size = 0
        self.batch_id = -1
        self.encoded: bytes | None = None


SHARED_BATCH_BYTES = 64 * 1024
"""Packed adds with at least this much payload are encoded once, when first queued, and the
same bytes are sent to every bookie of their write quorum; smaller ones wait on each stream
to be merged with the next adds of their ledger."""

_BATCHES_TAG = b"\x22"  # AddFrame.batches: field 4, length-delimited
_ENTRIES_TAG = b"\x2a"  # AddBatch.entries: field 5, length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_batch(
    batch_id: int,
    ledger_id: int,
    master_key: bytes,
    recovery: bool,
    durability: int,
    parts: Sequence[bytes],
) -> bytes:
    """An ``AddBatch`` as it travels inside an ``AddFrame`` (the frame's field 4), its
    entries being ``parts`` joined: built by hand, so the payloads are copied once (protobuf
    would copy them into the message and again out of it). Frames are such pieces and an
    encoded ``AddFrame`` of LAC updates and forces, concatenated."""
    head = pb.AddBatch(
        ledger_id=ledger_id,
        master_key=master_key,
        recovery=recovery,
        durability=durability,  # type: ignore[arg-type]
        batch_id=batch_id,
    ).SerializeToString()
    size = sum(len(part) for part in parts)
    length = _varint(size)
    body = len(head) + len(_ENTRIES_TAG) + len(length) + size
    return b"".join((_BATCHES_TAG, _varint(body), head, _ENTRIES_TAG, length, *parts))


class BatchEncoder:
    """Numbers add batches and encodes packed adds once for all their bookies: large ones
    when they are queued, smaller ones that travel alone (merged with no other adds) when
    their frame is built.

    Shared by the connections of a pool: batch ids are unique in the pool, so on every
    stream. The writer queues the same packed adds on the stream of each bookie of their
    write quorum in a row; :meth:`shared` encodes them for the first and hands the same bytes
    to the others (it remembers the last packed adds only).
    """

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._last: tuple[PackedEntries, tuple[int, bytes, bool, int], int, bytes] | None = None

    def next_id(self) -> int:
        """A batch id not given out before."""
        return next(self._ids)

    def shared(
        self,
        ledger_id: int,
        master_key: bytes,
        recovery: bool,
        durability: int,
        packed: PackedEntries,
    ) -> tuple[int, bytes]:
        """The id and encoding (:func:`encode_batch`) of ``packed`` as one batch."""
        key = (ledger_id, master_key, recovery, durability)
        last = self._last
        if last is not None and last[0] is packed and last[1] == key:
            return last[2], last[3]
        batch_id = self.next_id()
        encoded = encode_batch(
            batch_id, ledger_id, master_key, recovery, durability, (packed.blob,)
        )
        self._last = (packed, key, batch_id, encoded)
        return batch_id, encoded


def translate_rpc_error(bookie_id: str, exc: grpc.RpcError) -> WalogError:
    """The walog error for a failed call to ``bookie_id``."""
    described = isinstance(exc, grpc.Call | grpc.aio.AioRpcError | NativeCallError)
    code = exc.code() if described else None
    details = exc.details() if described else str(exc)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return UnauthorizedError(f"bookie {bookie_id} refused the credentials: {details}")
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return BookieCallUnsupportedError(f"bookie {bookie_id} does not know the call: {details}")
    name = code.name if code is not None else "error"
    return BookieUnavailableError(f"bookie {bookie_id}: {name}: {details}")


_STATUS = {int(s): s for s in Status}


def status_of(value: int) -> Status:
    """The :class:`Status` of a wire code."""
    # An unknown code (a newer bookie's) is an error, never success.
    return _STATUS.get(value, Status.IO_ERROR)


def verified_entries(
    bookie_id: str, ledger_id: int, first_entry_id: int, entries: Sequence[pb.Entry]
) -> tuple[list[StoredEntry], bool]:
    """Entries up to the first bad one (wrong id, wrong ledger or digest mismatch), and
    whether all of them were good."""
    out: list[StoredEntry] = []
    for offset, e in enumerate(entries):
        if (
            e.ledger_id != ledger_id
            or e.entry_id != first_entry_id + offset
            or entry_digest(e.ledger_id, e.entry_id, e.lac, e.data) != e.digest
        ):
            log.warning(
                "bookie served a corrupt entry",
                bookie=bookie_id,
                ledger_id=ledger_id,
                entry_id=first_entry_id + offset,
            )
            return out, False
        out.append(StoredEntry(e.ledger_id, e.entry_id, e.lac, e.data))
    return out, True


def queue_packed(
    batches: collections.deque[PendingBatch],
    ledger_id: int,
    master_key: bytes,
    recovery: bool,
    durability: int,
    callback: BatchCallback,
    packed: PackedEntries,
    now: float,
    max_entries: int,
    max_bytes: int,
    encoder: BatchEncoder,
) -> None:
    """Queue packed adds of one ledger (at ``now``): large ones (``SHARED_BATCH_BYTES``)
    as a batch of their own, encoded once for every bookie (``encoder``); smaller ones into
    the last queued batch when it is not encoded yet, shares their ledger, key, recovery
    flag, durability and callback and has room under ``max_entries`` entries and
    ``max_bytes`` of payload; into a new batch otherwise."""
    if packed.payload_bytes >= SHARED_BATCH_BYTES:
        batch = PendingBatch(ledger_id, master_key, recovery, durability, callback, now)
        batch.batch_id, batch.encoded = encoder.shared(
            ledger_id, master_key, recovery, durability, packed
        )
        batch.entry_ids = list(packed.entry_ids)
        batch.size = packed.payload_bytes
        batches.append(batch)
        return
    last = batches[-1] if batches else None
    if (
        last is None
        or last.encoded is not None
        or last.callback is not callback
        or last.ledger_id != ledger_id
        or last.master_key != master_key
        or last.recovery != recovery
        or last.durability != durability
        or len(last.entry_ids) + len(packed.entry_ids) > max_entries
        or last.size + packed.payload_bytes > max_bytes
    ):
        last = PendingBatch(ledger_id, master_key, recovery, durability, callback, now)
        batches.append(last)
    last.packed = None if last.parts else packed
    last.parts.append(packed.blob)
    last.entry_ids.extend(packed.entry_ids)
    last.size += packed.payload_bytes


def build_frame(
    batches: collections.deque[PendingBatch],
    lacs: list[tuple[int, int, bytes]],
    forces: list[tuple[int, int, bytes]],
    max_entries: int,
    max_bytes: int,
    encoder: BatchEncoder,
) -> tuple[list[bytes], list[PendingBatch]]:
    """Take the next frame off the queues, encoded in pieces (the ``AddFrame`` is their
    concatenation; they are sent as they are, not joined), and the batches it carries: whole
    batches while they fit in ``max_entries`` entries and ``max_bytes`` of payload (at least
    one batch; :func:`queue_packed` fills batches up to the same limits), numbered by
    ``encoder`` unless they already are. LAC updates and forces join the frame only when no
    add is left behind, since a bookie handles them after the frame's adds."""
    pieces: list[bytes] = []
    sent: list[PendingBatch] = []
    count = size = 0
    while batches and (
        count == 0
        or (
            count + len(batches[0].entry_ids) <= max_entries and size + batches[0].size <= max_bytes
        )
    ):
        batch = batches.popleft()
        if batch.encoded is None and batch.packed is not None:
            # Packed adds that travel alone: encoded once for every stream they go to.
            batch.batch_id, encoded = encoder.shared(
                batch.ledger_id, batch.master_key, batch.recovery, batch.durability, batch.packed
            )
            pieces.append(encoded)
        elif batch.encoded is None:
            batch.batch_id = encoder.next_id()
            pieces.append(
                encode_batch(
                    batch.batch_id,
                    batch.ledger_id,
                    batch.master_key,
                    batch.recovery,
                    batch.durability,
                    batch.parts,
                )
            )
        else:
            pieces.append(batch.encoded)
        # The payloads now live in the frame only.
        batch.parts, batch.encoded, batch.packed = [], None, None
        sent.append(batch)
        count += len(batch.entry_ids)
        size += batch.size
    if not batches and (lacs or forces):
        frame = pb.AddFrame()
        for ledger_id, lac, master_key in lacs:
            frame.lacs.add(ledger_id=ledger_id, lac=lac, master_key=master_key)
        for ledger_id, request_id, master_key in forces:
            frame.forces.add(ledger_id=ledger_id, request_id=request_id, master_key=master_key)
        lacs.clear()
        forces.clear()
        pieces.append(frame.SerializeToString())
    return pieces, sent


__all__ = [
    "SHARED_BATCH_BYTES",
    "BatchEncoder",
    "PendingBatch",
    "build_frame",
    "encode_batch",
    "queue_packed",
    "status_of",
    "translate_rpc_error",
    "verified_entries",
]

"""Pure wire rules of the bookie protocol, client side: frames, status codes, digest checks,
and the translation of ``grpc.RpcError`` into walog errors (the one place it happens).

No I/O here: :mod:`walog.transport.add_stream` and :mod:`walog.transport.grpc` use these.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence

import grpc
import grpc.aio

from walog._log import get_logger
from walog.digest import entry_digest
from walog.errors import BookieUnavailableError, UnauthorizedError, WalogError
from walog.proto import bookie_pb2 as pb
from walog.transport.base import BatchCallback, Status, StoredEntry
from walog.transport.packing import PackedEntries

log = get_logger("walog.transport")


class PendingBatch:
    """Adds of one ledger for one callback waiting for a frame (see ``AddBatch``): packed
    pieces in ``parts``, joined when the frame is built.

    ``entry_ids`` are those not answered yet; ``batch_id`` is set when it is sent.
    """

    __slots__ = (
        "batch_id",
        "callback",
        "durability",
        "entry_ids",
        "ledger_id",
        "master_key",
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
        self.entry_ids: list[int] = []
        self.size = 0
        self.batch_id = -1


def translate_rpc_error(bookie_id: str, exc: grpc.RpcError) -> WalogError:
    """The walog error for a failed call to ``bookie_id``."""
    code = exc.code() if isinstance(exc, grpc.Call | grpc.aio.AioRpcError) else None
    details = exc.details() if isinstance(exc, grpc.Call | grpc.aio.AioRpcError) else str(exc)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return UnauthorizedError(f"bookie {bookie_id} refused the credentials: {details}")
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
) -> None:
    """Queue packed adds of one ledger: into the last queued batch when it shares their
    ledger, key, recovery flag, durability and callback and has room under ``max_entries``
    entries and ``max_bytes`` of payload; into a new batch (queued at ``now``) otherwise."""
    last = batches[-1] if batches else None
    if (
        last is None
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
    last.parts.append(packed.blob)
    last.entry_ids.extend(packed.entry_ids)
    last.size += packed.payload_bytes


def build_frame(
    batches: collections.deque[PendingBatch],
    lacs: list[tuple[int, int, bytes]],
    forces: list[tuple[int, int, bytes]],
    max_entries: int,
    max_bytes: int,
    batch_ids: Iterator[int],
) -> tuple[pb.AddFrame, list[PendingBatch]]:
    """Take the next frame off the queues, and the batches it carries (numbered from
    ``batch_ids``): whole batches while they fit in ``max_entries`` entries and ``max_bytes``
    of payload (at least one batch; :func:`queue_packed` fills batches up to the same limits).
    LAC updates and forces join the frame only when no add is left behind, since a bookie
    handles them after the frame's adds."""
    frame = pb.AddFrame()
    sent: list[PendingBatch] = []
    count = size = 0
    while batches and (
        count == 0
        or (
            count + len(batches[0].entry_ids) <= max_entries and size + batches[0].size <= max_bytes
        )
    ):
        batch = batches.popleft()
        batch.batch_id = next(batch_ids)
        frame.batches.add(
            batch_id=batch.batch_id,
            ledger_id=batch.ledger_id,
            master_key=batch.master_key,
            recovery=batch.recovery,
            durability=batch.durability,
            entries=b"".join(batch.parts),
        )
        batch.parts = []  # the payloads now live in the frame only
        sent.append(batch)
        count += len(batch.entry_ids)
        size += batch.size
    if not batches:
        for ledger_id, lac, master_key in lacs:
            frame.lacs.add(ledger_id=ledger_id, lac=lac, master_key=master_key)
        for ledger_id, request_id, master_key in forces:
            frame.forces.add(ledger_id=ledger_id, request_id=request_id, master_key=master_key)
        lacs.clear()
        forces.clear()
    return frame, sent


__all__ = [
    "PendingBatch",
    "build_frame",
    "queue_packed",
    "status_of",
    "translate_rpc_error",
    "verified_entries",
]

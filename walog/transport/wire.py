"""Pure wire rules of the bookie protocol, client side: frames, status codes, digest checks,
and the translation of ``grpc.RpcError`` into walog errors (the one place it happens).

No I/O here: :mod:`walog.transport.add_stream` and :mod:`walog.transport.grpc` use these.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import grpc
import grpc.aio

from walog._log import get_logger
from walog.digest import entry_digest
from walog.errors import BookieUnavailableError, UnauthorizedError, WalogError
from walog.proto import bookie_pb2 as pb
from walog.transport.base import Status, StoredEntry

log = get_logger("walog.transport")

QueuedAdd = tuple[int, int, int, bytes, int, bytes, bool, int]
"""An add waiting for its frame: ledger, entry, lac, data, digest, key, recovery, durability."""


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


def build_frame(
    adds: collections.deque[QueuedAdd],
    lacs: list[tuple[int, int, bytes]],
    forces: list[tuple[int, int, bytes]],
    max_entries: int,
    max_bytes: int,
) -> pb.AddFrame:
    """Take the next frame off the queues: up to ``max_entries`` adds, closed once it holds
    ``max_bytes`` of payload (at least one add). LAC updates and forces join the frame only
    when no add is left behind, since a bookie handles them after the frame's adds."""
    frame = pb.AddFrame()
    count = size = 0
    while adds and count < max_entries and (size < max_bytes or count == 0):
        ledger_id, entry_id, lac, data, digest, master_key, recovery, durability = adds.popleft()
        # Filling fields in place is the cheapest way to build nested messages.
        item = frame.adds.add(master_key=master_key, recovery=recovery, durability=durability)
        entry = item.entry
        entry.ledger_id = ledger_id
        entry.entry_id = entry_id
        entry.lac = lac
        entry.data = data
        entry.digest = digest
        count += 1
        size += len(data)
    if not adds:
        for ledger_id, lac, master_key in lacs:
            frame.lacs.add(ledger_id=ledger_id, lac=lac, master_key=master_key)
        for ledger_id, request_id, master_key in forces:
            frame.forces.add(ledger_id=ledger_id, request_id=request_id, master_key=master_key)
        lacs.clear()
        forces.clear()
    return frame


__all__ = ["QueuedAdd", "build_frame", "status_of", "translate_rpc_error", "verified_entries"]

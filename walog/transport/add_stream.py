"""One client's ``Add`` stream to one bookie: batched frames out, matched replies in.

Adds are packed as they are queued into batches of one ledger (one bytes field per batch,
see ``AddBatch`` in the proto; large batches are encoded once for all their bookies, see
:class:`~walog.transport.codec.BatchEncoder`); batches, explicit LAC updates and forces are
flushed as :class:`AddFrame` messages, encoded by hand, of up to ``max_frame_entries`` /
``max_frame_bytes`` whenever the stream can take a message: while one frame is being
written, the next one fills up. There are no flush timers; Python pays per message, not per
byte, so the batching comes from the stream's own back-pressure. Over a native call
(walog/transport/native.py) the frames go out at the end of the loop turn in which their
adds were queued, straight from a scheduled callback while the socket can take them, and
the replies are handled as they arrive: no task wakes up per frame.

Each batch has an id, unique in the client, by the time it is sent; a reply names the
batch and the entries of it that share one status (usually all of them), and goes straight
to the batch's callback with their ids (forces are matched by request id). A resent entry
travels in another batch, so each copy gets its own answer. A broken stream fails every
request pending on it with :class:`BookieUnavailableError` (:class:`UnauthorizedError` for
refused credentials); its owner opens a new stream for the next request. A request not
answered within ``timeouts.add`` seconds fails the stream (the bookie is stuck or gone); one
timer per stream watches the oldest unanswered request, not one timer per add.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import grpc
import grpc.aio

from walog.config import ClientConfig
from walog.errors import BookieUnavailableError, UnauthorizedError, WalogError
from walog.transport.base import AddReply, BatchCallback, ForceReply
from walog.transport.codec import (
    BatchEncoder,
    PendingBatch,
    build_frame,
    queue_packed,
    status_of,
    translate_rpc_error,
)
from walog.transport.native import NativeCall, NativeCallError
from walog.wire.packing import PackedEntries
from walog.wire.proto import bookie_pb2 as pb


class StreamOwner(Protocol):
    """What a stream needs from the connection that owns it."""

    bookie_id: str
    config: ClientConfig
    add_timeout: float
    encoder: BatchEncoder

    def stream_broken(self, stream: AddStream) -> None:
        """Forget a broken stream."""


class AddCall(Protocol):
    """What a stream needs of its call: grpc.aio's stream-stream call, or a native one."""

    async def write(self, message: bytes) -> None:
        """Send one frame."""

    async def read(self) -> Any:
        """The next reply frame, or ``grpc.aio.EOF``."""

    def cancel(self) -> bool:
        """Drop the call."""


class AddStream:
    """One ``Add`` stream: the send queue, the requests awaiting replies, the watchdog.

    Args:
        client: the connection that owns the stream.
        open_call: opens the call the stream runs on (once, when the stream starts);
            a :class:`WalogError` from it fails the stream.
    """

    def __init__(self, client: StreamOwner, open_call: Callable[[], Awaitable[AddCall]]) -> None:
        self._client = client
        self._open_call = open_call
        self._call: AddCall | None = None
        self._loop = asyncio.get_running_loop()
        self._batches: collections.deque[PendingBatch] = collections.deque()
        self._lacs: list[tuple[int, int, bytes]] = []
        self._forces: list[tuple[int, int, bytes]] = []
        # Batches sent and not fully answered, by id, oldest first (dicts keep insertion
        # order): one not answered within ``timeouts.add`` fails the stream (the bookie).
        self._unanswered: dict[int, PendingBatch] = {}
        self._force_waiters: dict[int, asyncio.Future[ForceReply]] = {}
        self._force_sent_at: dict[int, float] = {}
        self._watchdog: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()
        self.broken = False
        self._direct: NativeCall | None = None
        """A native call, once open: frames go out at the end of the loop turn in which
        they were queued, and replies come in as they arrive, without task wake-ups."""
        self._flush_pending = False
        self._sender = self._loop.create_task(self._send_loop())
        self._receiver: asyncio.Task[None] | None = None

    def add_packed(
        self,
        ledger_id: int,
        master_key: bytes,
        recovery: bool,
        durability: int,
        packed: PackedEntries,
        callback: BatchCallback,
    ) -> None:
        """Queue packed adds of one ledger; ``callback`` gets the ids each reply answers
        (``durability`` is the wire enum)."""
        config = self._client.config
        queue_packed(
            self._batches,
            ledger_id,
            master_key,
            recovery,
            durability,
            callback,
            packed,
            self._arm_watchdog(),
            config.max_frame_entries,
            config.max_frame_bytes,
            self._client.encoder,
        )
        self._kick()

    def lac(self, ledger_id: int, lac: int, master_key: bytes) -> None:
        self._lacs.append((ledger_id, lac, master_key))
        self._kick()

    def force(
        self, ledger_id: int, request_id: int, master_key: bytes
    ) -> asyncio.Future[ForceReply]:
        future: asyncio.Future[ForceReply] = self._loop.create_future()
        self._force_waiters[request_id] = future
        self._forces.append((ledger_id, request_id, master_key))
        self._force_sent_at[request_id] = self._arm_watchdog()
        self._kick()
        return future

    # -- timeouts ---------------------------------------------------------------------

    def _arm_watchdog(self) -> float:
        """The time now; the watchdog runs while requests are unanswered (one timer)."""
        now = self._loop.time()
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(now + self._client.add_timeout, self._check)
        return now

    def _check(self) -> None:
        self._watchdog = None
        never = float("inf")
        oldest = min(
            next((b.queued_at for b in self._unanswered.values()), never),
            self._batches[0].queued_at if self._batches else never,
            next(iter(self._force_sent_at.values()), never),
        )
        if oldest == never:
            return  # everything answered
        deadline = oldest + self._client.add_timeout
        if deadline <= self._loop.time():
            self.fail(f"no answer within {self._client.add_timeout} seconds")
            if self._direct is not None:
                self._direct.drop_connection()
        else:
            self._watchdog = self._loop.call_at(deadline, self._check)

    # -- sending ----------------------------------------------------------------------

    def _kick(self) -> None:
        """Something was queued: flush at the end of this loop turn over a native call,
        else wake the sender task."""
        if self._direct is None:
            self._wake.set()
        elif not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush_direct)

    def _flush_direct(self) -> None:
        self._flush_pending = False
        call = self._direct
        if call is None or self.broken:
            return
        try:
            while self._queued() and call.writable:
                call.send_parts(self._next_frame())
        except grpc.RpcError as exc:
            self._failed_call(exc)
            return
        if self._queued():
            self._wake.set()  # the socket is full: the sender task waits until it drains

    def _queued(self) -> bool:
        return bool(self._batches or self._lacs or self._forces)

    def _next_frame(self) -> list[bytes]:
        """Take the next frame off the queues, in pieces (:func:`build_frame`); its batches
        now await answers."""
        config = self._client.config
        frame, sent = build_frame(
            self._batches,
            self._lacs,
            self._forces,
            config.max_frame_entries,
            config.max_frame_bytes,
            self._client.encoder,
        )
        for batch in sent:
            self._unanswered[batch.batch_id] = batch
        return frame

    async def _send_loop(self) -> None:
        try:
            call = self._call = await self._open_call()
            if isinstance(call, NativeCall):
                self._direct = call
                call.subscribe(self._on_reply, self._on_end)
            else:
                self._receiver = self._loop.create_task(self._receive_loop(call))
            while True:
                while self._queued():
                    if self._direct is not None:
                        # Wait first, then take the frame and send it in one step: a
                        # scheduled flush may send newer frames meanwhile, never before it.
                        await self._direct.wait_writable()
                        if self._queued():
                            self._direct.send_parts(self._next_frame())
                    else:
                        await call.write(b"".join(self._next_frame()))
                await self._wake.wait()
                self._wake.clear()
        except WalogError as exc:  # the call could not be opened
            self.fail(str(exc), unauthorized=isinstance(exc, UnauthorizedError))
        except grpc.RpcError as exc:
            self._failed_call(exc)
        except Exception as exc:  # the call ended under us (UsageError, InvalidStateError)
            self.fail(f"add stream failed: {exc!r}")

    def _failed_call(self, exc: grpc.RpcError) -> None:
        error = translate_rpc_error(self._client.bookie_id, exc)
        self.fail(str(error), unauthorized=isinstance(error, UnauthorizedError))

    # -- receiving --------------------------------------------------------------------

    async def _receive_loop(self, call: AddCall) -> None:
        try:
            while True:
                frame = await call.read()
                if not isinstance(frame, pb.AddResponseFrame):  # grpc.aio.EOF
                    self.fail("the bookie ended the add stream")
                    return
                self._dispatch(frame)
        except grpc.RpcError as exc:
            self._failed_call(exc)
        except Exception as exc:  # a malformed reply must not leave adds waiting forever
            self.fail(f"add stream failed: {exc!r}")

    def _on_reply(self, frame: pb.AddResponseFrame) -> None:
        try:
            self._dispatch(frame)
        except Exception as exc:  # a malformed reply must not leave adds waiting forever
            self.fail(f"add stream failed: {exc!r}")

    def _on_end(self, error: NativeCallError | None) -> None:
        if error is None:
            self.fail("the bookie ended the add stream")
        else:
            self._failed_call(error)

    def _dispatch(self, frame: pb.AddResponseFrame) -> None:
        unanswered = self._unanswered
        for result in frame.results:
            batch = unanswered.get(result.batch_id)
            if batch is None:
                continue  # an answer to a request this client gave up on
            if result.entry_ids:  # part of the batch (statuses differ): rare
                entry_ids: Sequence[int] = list(result.entry_ids)
                answered = set(entry_ids)
                batch.entry_ids = [i for i in batch.entry_ids if i not in answered]
            else:
                entry_ids, batch.entry_ids = batch.entry_ids, []
            if not batch.entry_ids:
                del unanswered[result.batch_id]
            reply = AddReply(
                status_of(result.status),
                result.last_add_synced,
                result.incarnation,
                result.max_entry_bytes,  # set with ENTRY_TOO_LARGE only
            )
            batch.callback(entry_ids, reply)
        for forced in frame.forces:
            force = self._force_waiters.pop(forced.request_id, None)
            if force is None:
                continue
            self._force_sent_at.pop(forced.request_id, None)
            if not force.done():
                force.set_result(
                    ForceReply(status_of(forced.status), forced.last_add_synced, forced.incarnation)
                )

    # -- failure ----------------------------------------------------------------------

    def fail(self, reason: str, *, unauthorized: bool = False) -> None:
        """Break the stream: every pending request fails, the next one opens a new stream."""
        if self.broken:
            return
        self.broken = True
        self._client.stream_broken(self)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        error_type = UnauthorizedError if unauthorized else BookieUnavailableError
        message = (
            reason if reason.startswith("bookie ") else f"bookie {self._client.bookie_id}: {reason}"
        )
        batches = [*self._unanswered.values(), *self._batches]
        forces = list(self._force_waiters.values())
        self._unanswered.clear()
        self._force_waiters.clear()
        self._batches.clear()
        self._lacs.clear()
        self._forces.clear()
        self._force_sent_at.clear()
        if self._call is not None:
            self._call.cancel()
        current = asyncio.current_task()
        for task in (self._sender, self._receiver):
            if task is not None and task is not current:
                task.cancel()
        # Last: the callbacks may send again, on a new stream.
        for future in forces:
            if not future.done():
                future.set_exception(error_type(message))
        for batch in batches:
            # The entries not answered yet (a batch may be answered in parts).
            batch.callback(batch.entry_ids, error_type(message))


__all__ = ["AddCall", "AddStream", "StreamOwner"]

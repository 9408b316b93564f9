"""One client's add stream: batches of entries per frame in, batched results out.

For each incoming :class:`AddFrame` the batches start concurrently, each as one storage
call (:meth:`BookieCore.add_batch`: its new entries are one journal item, so a PERSISTENT
batch completes with one group sync), then the frame's LAC updates are applied, then its
forces run. A LAC update is applied right after the frame's batches were stored (it waits
for no sync: like a LAC piggybacked on an entry it says what is confirmed elsewhere, and
tailing readers wait on it). A force covers every add of the same and earlier frames: it
waits until they are answered, then syncs the journal.

Every result carries the storage's incarnation (:attr:`BookieCore.incarnation`), so a
writer learns from the answer itself that the bookie restarted since it last answered.

Results travel back in :class:`AddResponseFrame` messages. The writer side sends whatever results
have completed as soon as the stream can take a message; results that complete while a
message is being written go into the next one. There are no timers: the batching comes from
the stream's own back-pressure. A client that stops reading its answers stops being read.

The gRPC port drives a stream through iterators (:meth:`IncomingAddStream.run`); the native port
drives it by calls (:meth:`IncomingAddStream.run_direct`, :meth:`~IncomingAddStream.feed`,
:meth:`~IncomingAddStream.end_input`): frames are dispatched as they arrive and the results of a
loop turn go out at its end, without a task wake-up per frame.

One bad entry never ends the stream: it is answered with its status (BAD_REQUEST for a
malformed add, TOO_MANY_REQUESTS over the admission bound, IO_ERROR if storage fails). A
malformed batch (bad key, unknown durability, packed entries ending in garbage) is answered
BAD_REQUEST as a whole. A result names its batch and, when the batch's entries do not all
share one status, the entries it answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, Protocol, cast

import structlog

from bookie.server.admission import Admission, ServiceStats
from bookie.storage.engine import BookieCore, unpack_entries
from walog.wire.digest import MASTER_KEY_BYTES
from walog.wire.durability import Durability
from walog.wire.packing import PackedEntry
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.status import Status

log = structlog.get_logger("bookie.add")

MAX_UNSENT_RESULTS = 65536
"""A stream stops reading frames while more results than this wait to be sent."""

_DURABILITY = {pb.PERSISTENT: Durability.PERSISTENT, pb.VOLATILE: Durability.VOLATILE}


def wire_status(status: Status) -> pb.Status.ValueType:
    """A storage status as the wire enum (the numbers are equal by construction)."""
    return cast("pb.Status.ValueType", int(status))


def batch_problem(batch: pb.AddBatch) -> str | None:
    """Why a batch as a whole is malformed (BAD_REQUEST), or None."""
    if batch.ledger_id < 0:
        return f"negative ledger id {batch.ledger_id}"
    if len(batch.master_key) != MASTER_KEY_BYTES:
        return f"master key of {len(batch.master_key)} bytes, expected {MASTER_KEY_BYTES}"
    if batch.durability not in _DURABILITY:
        return f"unknown durability {batch.durability}"
    return None


class StreamOwner(Protocol):
    """What an add stream uses of the service that opened it (bookie/server/service.py)."""

    @property
    def core(self) -> BookieCore:
        """The storage core the adds go to."""

    @property
    def stats(self) -> ServiceStats:
        """The service's counters."""

    @property
    def admission(self) -> Admission:
        """The bound on add bytes in flight."""

    @property
    def draining(self) -> asyncio.Event:
        """Set when the bookie drains: streams end once their accepted adds are answered."""

    def adopt(self, tasks: set[asyncio.Task[None]]) -> None:
        """Keep the adds of an ended stream referenced until they finish."""


class IncomingAddStream:
    """The state of one ``Add`` RPC: in-flight adds, completed results, the writer's wake-up.

    Args:
        service: the service that opened the stream (storage core, admission, counters).
        on_write: called with a ledger id whenever an add to it is accepted (GC bookkeeping).
    """

    def __init__(self, service: StreamOwner, on_write: Callable[[int], None]) -> None:
        self._service = service
        self._core = service.core
        self._on_write = on_write
        # Results are appended straight into the next response frame (no second copy).
        self._frame = pb.AddResponseFrame()
        self._wake = asyncio.Event()
        # Requests of this stream not answered yet. A force waits for the adds pending
        # when it arrived (frame order: adds, then LAC updates, then forces); waiting for
        # all of them, not only its ledger's, costs nothing extra: they are in the same
        # journal groups.
        self._pending: set[asyncio.Task[None]] = set()
        self._reading_done = False
        # Set whenever a response frame went out: a reader ahead of a slow client waits
        # on it rather than piling up unsent results.
        self._sent = asyncio.Event()
        # Driven by calls (run_direct): where frames go, whether they can, the end.
        self._sink: Callable[[pb.AddResponseFrame], None] | None = None
        self._sink_ready: Callable[[], bool] = lambda: True
        self._on_finished: Callable[[], None] = lambda: None
        self._flush_pending = False
        self._drain_watch: asyncio.Future[Any] | None = None
        self._closed = False

    async def run(self, frames: AsyncIterator[pb.AddFrame]) -> AsyncIterator[pb.AddResponseFrame]:
        """Consume ``frames`` and yield response frames until the client half-closes (or the
        bookie drains) and every accepted request is answered."""
        reader = asyncio.create_task(self._read(frames))
        # On drain, stop reading even from an idle client: the stream then ends once every
        # accepted request is answered, and the client reconnects elsewhere.
        drain = asyncio.create_task(self._service.draining.wait())
        drain.add_done_callback(lambda _: reader.cancel())
        try:
            while True:
                # Check the state before sleeping: results that completed while the last
                # frame was being written go out at once, in one frame.
                if self._frame.results or self._frame.forces:
                    frame, self._frame = self._frame, pb.AddResponseFrame()
                    yield frame
                    self._sent.set()
                    continue
                if self._reading_done and not self._pending:
                    return
                await self._wake.wait()
                self._wake.clear()
        finally:
            reader.cancel()
            drain.cancel()
            # Adds already handed to storage finish on their own (journal writes are not
            # interrupted); the service keeps them referenced until they are done.
            self._service.adopt(self._pending)

    # -- driven by calls (the native port) ---------------------------------------------

    def run_direct(
        self,
        sink: Callable[[pb.AddResponseFrame], None],
        ready: Callable[[], bool],
        finished: Callable[[], None],
    ) -> None:
        """Start a stream driven by calls: :meth:`feed` each frame, :meth:`end_input` at the
        client's half-close. Each loop turn's results go to ``sink`` at its end while
        ``ready()`` (the socket can take them; call :meth:`flush` when it can again);
        ``finished`` is called once the input ended (or the bookie drains) and every
        accepted request is answered."""
        self._sink, self._sink_ready, self._on_finished = sink, ready, finished
        self._drain_watch = asyncio.ensure_future(self._service.draining.wait())
        self._drain_watch.add_done_callback(lambda _: self.end_input())

    def feed(self, frame: pb.AddFrame) -> None:
        """One frame from the client (ignored once the input ended: a draining bookie
        reads no more)."""
        if not self._reading_done:
            self._dispatch(frame)

    def end_input(self) -> None:
        """No more frames: the stream finishes once every accepted request is answered."""
        self._reading_done = True
        self._notify()

    def flush(self) -> None:
        """Send the results gathered so far if the sink can take them; finish when done."""
        self._flush_pending = False
        if self._closed or self._sink is None:
            return
        if self._frame.results or self._frame.forces:
            if not self._sink_ready():
                return
            frame, self._frame = self._frame, pb.AddResponseFrame()
            self._sink(frame)
        if self._reading_done and not self._pending:
            self.abandon()
            self._on_finished()

    def abandon(self) -> None:
        """Stop for good (the call was cancelled or its connection lost): nothing more is
        sent; adds already handed to storage finish on their own."""
        if self._closed:
            return
        self._closed = True
        self._reading_done = True
        if self._drain_watch is not None:
            self._drain_watch.cancel()
        self._service.adopt(self._pending)

    def _notify(self) -> None:
        """Results or the end are ready: wake the iterator, or flush at the end of the turn."""
        if self._sink is None:
            self._wake.set()
        elif not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self.flush)

    # -- driven by iterators (the gRPC port) ------------------------------------------

    async def _read(self, frames: AsyncIterator[pb.AddFrame]) -> None:
        draining = self._service.draining
        try:
            async for frame in frames:
                self._dispatch(frame)
                if draining.is_set():
                    break
                while len(self._frame.results) > MAX_UNSENT_RESULTS:
                    # The client does not read its answers: stop reading its requests
                    # (gRPC flow control then slows the client down).
                    self._sent.clear()
                    await self._sent.wait()
        except asyncio.CancelledError:
            pass  # drain or end of the RPC
        except Exception as exc:  # the client vanished mid-stream; nothing to answer
            log.debug("add stream read ended", error=repr(exc))
        finally:
            self._reading_done = True
            self._notify()

    def _dispatch(self, frame: pb.AddFrame) -> None:
        service = self._service
        stats = service.stats
        admission = service.admission
        received = time.monotonic()
        for batch in frame.batches:
            ledger_id = batch.ledger_id
            blob = batch.entries
            entries, garbage = unpack_entries(blob)
            problem = garbage or batch_problem(batch) or (None if entries else "no entries")
            if problem is not None:
                stats.bad_requests += 1
                log.warning("bad add batch", ledger_id=ledger_id, problem=problem)
                self._answer(batch, (), Status.BAD_REQUEST, -1)
                continue
            if not admission.try_acquire(len(blob)):
                stats.rejected_adds += len(entries)
                self._answer(batch, (), Status.TOO_MANY_REQUESTS, -1)
                continue
            self._on_write(ledger_id)
            self._track(self._add(batch, blob, entries, received))
        for lac in frame.lacs:
            if lac.ledger_id < 0 or lac.lac < -1:
                stats.bad_requests += 1
            else:
                # After the first steps of the batch tasks created above (call_soon is
                # FIFO): those put the batches' entries in the write cache.
                asyncio.get_running_loop().call_soon(self._update_lac, lac)
        for force in frame.forces:
            if force.ledger_id < 0 or len(force.master_key) != MASTER_KEY_BYTES:
                stats.bad_requests += 1
                self._answer_force(force, Status.BAD_REQUEST, -1)
            else:
                self._track(self._force(force, set(self._pending)))

    def _track(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        self._notify()

    def _answer(
        self, batch: pb.AddBatch, entry_ids: Iterable[int], status: Status, last_add_synced: int
    ) -> None:
        """Answer entries of ``batch`` (none named: all of them)."""
        self._frame.results.add(
            batch_id=batch.batch_id,
            ledger_id=batch.ledger_id,
            entry_ids=entry_ids,
            status=wire_status(status),
            last_add_synced=last_add_synced,
            incarnation=self._core.incarnation,
            # The writer's error names the limit its entry is over.
            max_entry_bytes=(
                self._core.config.max_entry_bytes if status is Status.ENTRY_TOO_LARGE else 0
            ),
        )
        self._notify()

    def _answer_force(self, force: pb.ForceRequest, status: Status, last_add_synced: int) -> None:
        self._frame.forces.add(
            ledger_id=force.ledger_id,
            request_id=force.request_id,
            status=wire_status(status),
            last_add_synced=last_add_synced,
            incarnation=self._core.incarnation,
        )
        self._notify()

    async def _add(
        self, batch: pb.AddBatch, blob: bytes, entries: list[PackedEntry], received: float
    ) -> None:
        ledger_id = batch.ledger_id
        try:
            answers = await self._core.add_batch(
                ledger_id,
                batch.master_key,
                entries,
                recovery=batch.recovery,
                durability=_DURABILITY[batch.durability],
                packed=blob,
            )
        except Exception:
            log.exception("add failed", ledger_id=ledger_id, entries=len(entries))
            answers = [(Status.IO_ERROR, [e.entry_id for e in entries], -1)]
        finally:
            self._service.admission.release(len(blob))
        stats = self._service.stats
        stats.adds += len(entries)
        stats.add_bytes += len(blob)
        whole = len(answers) == 1
        for status, entry_ids, last_add_synced in answers:
            if status != Status.OK:
                stats.failed_adds += len(entry_ids)
                if status == Status.BAD_REQUEST:
                    stats.bad_requests += len(entry_ids)
                    log.warning("bad adds", ledger_id=ledger_id, entry_ids=entry_ids[:8])
            self._answer(batch, () if whole else entry_ids, status, last_add_synced)
        self._core.latencies.record("add", time.monotonic() - received)

    def _update_lac(self, lac: pb.LacUpdate) -> None:
        try:
            status = self._core.update_lac(lac.ledger_id, lac.lac, lac.master_key)
        except Exception:
            log.exception("lac update failed", ledger_id=lac.ledger_id)
            return
        if status != Status.OK:
            # Explicit LAC updates have no answer on the wire; the next add or update
            # carries a newer LAC anyway.
            log.debug("lac update refused", ledger_id=lac.ledger_id, status=Status(status).name)

    async def _force(self, force: pb.ForceRequest, before: set[asyncio.Task[None]]) -> None:
        if before:
            await asyncio.wait(before)
        try:
            status, last_add_synced = await self._core.force(force.ledger_id, force.master_key)
        except Exception:
            log.exception("force failed", ledger_id=force.ledger_id)
            status, last_add_synced = Status.IO_ERROR, -1
        self._service.stats.forces += 1
        self._answer_force(force, status, last_add_synced)


__all__ = ["IncomingAddStream", "StreamOwner", "batch_problem", "wire_status"]

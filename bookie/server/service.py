"""The bookie's calls: adds, reads, fencing, LAC, info, over one storage core.

:class:`BookieService` is the one object both front ends call: the gRPC port
(bookie/server/grpc_port.py) registers it as the ``walog.bookie.v1.Bookie`` servicer, the
native port (bookie/server/native_port.py) dispatches its frames to the same methods. The
add stream lives in
bookie/server/add_stream.py.

Protocol answers are statuses, never gRPC errors: clients count them (coverage, quorums).
gRPC errors are left for transport problems (bad token, server shutting down).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio

from bookie.config import BookieConfig
from bookie.server.add_stream import IncomingAddStream, wire_status
from bookie.server.admission import Admission, ServiceStats
from bookie.storage.engine import BookieCore, StoredRecord
from walog._version import __version__
from walog.metrics.histogram import LoopHistogram
from walog.wire.digest import MASTER_KEY_BYTES
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc
from walog.wire.status import Status

DEFAULT_READ_BYTES = 4 * 1024 * 1024 - 1024
"""A range read's answer holds at most this many bytes (payload and
:data:`~bookie.storage.entry_storage.READ_ENTRY_OVERHEAD` per entry) unless the request
asks less: it fits a gRPC client's default 4 MiB message limit (unless a single entry is larger)."""
MAX_READ_BYTES = 32 * 1024 * 1024
"""A range read's answer holds at most this many bytes, whatever the request asks, so it
stays under the message limit (a single entry is always served)."""
MAX_LONG_POLL_S = 600.0
"""Longest long poll a bookie holds, whatever the client asks."""
MAX_LISTED_RANGES = 65536
"""Ranges one ``ListEntries`` answer holds at most (a few hundred KiB at worst): a longer
list is cut there, and the client asks again past what the answer covers."""
MIN_HEARTBEAT_S = 0.05
"""Shortest heartbeat interval of a LAC watch, whatever the client asks."""


def _key_ok(key: bytes) -> bool:
    return len(key) == MASTER_KEY_BYTES


class BookieService(pb_grpc.BookieServicer):
    """The bookie RPCs over one storage core.

    Args:
        core: the opened storage core.
        config: the bookie's settings.
        instance_id: the cookie's instance id (reported by ``Info``).
    """

    def __init__(self, core: BookieCore, config: BookieConfig, instance_id: str) -> None:
        self.core = core
        self.config = config
        self.instance_id = instance_id
        self.native_port = 0
        """The native protocol's port once it listens (0: none)."""
        self.native_socket = ""
        """The native protocol's Unix socket once it listens ("": none)."""
        self.stats = ServiceStats()
        self.read_latency = LoopHistogram()
        """Seconds the storage took to answer each read (long-poll waits excluded)."""
        self.admission = Admission(config.max_inflight_bytes)
        self.draining = asyncio.Event()
        self.last_write: dict[int, float] = {}
        """Monotonic time of the last accepted add per ledger (the GC's grace rule)."""
        self._orphans: set[asyncio.Task[None]] = set()

    def adopt(self, tasks: set[asyncio.Task[None]]) -> None:
        """Keep tasks of an ended stream referenced until they finish."""
        for task in tasks:
            if not task.done():
                self._orphans.add(task)
                task.add_done_callback(self._orphans.discard)

    async def wait_orphans(self) -> None:
        """Wait for adds of ended streams (drain)."""
        if self._orphans:
            await asyncio.wait(set(self._orphans))

    def _mark_write(self, ledger_id: int) -> None:
        self.last_write[ledger_id] = time.monotonic()

    def open_add_stream(self) -> IncomingAddStream:
        """A new add stream of this service (either port's; see bookie/server/add_stream.py)."""
        self.stats.add_streams += 1
        return IncomingAddStream(self, self._mark_write)

    async def Add(
        self, request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.AddResponseFrame]:
        """Bidirectional add stream (see bookie/server/add_stream.py)."""
        async for frame in self.open_add_stream().run(request_iterator):
            yield frame

    async def Read(
        self, request: pb.ReadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReadResponse:
        """Range read; a fencing read fences (persisted) first; long poll on the LAC."""
        self.stats.reads += 1
        ledger_id = request.ledger_id
        if (
            ledger_id < 0
            or request.first_entry_id < 0
            or request.last_entry_id < request.first_entry_id
            or request.max_bytes < 0
            or (request.fence and not _key_ok(request.master_key))
        ):
            self.stats.bad_requests += 1
            return pb.ReadResponse(status=pb.BAD_REQUEST, lac=-1)
        if request.fence:
            # Recovery reads are fencing reads (docs/protocol.md, "Fencing reads"): the fence
            # is persisted before
            # the bookie answers anything about the ledger.
            self.stats.fences += 1
            status, _lac, _last = await self.core.fence(ledger_id, request.master_key)
            if status != Status.OK:
                return pb.ReadResponse(
                    status=wire_status(status), lac=self.core.lac(ledger_id), fenced=True
                )
        long_poll = request.long_poll_timeout_ms > 0
        if long_poll:
            self.stats.long_polls += 1
            timeout = min(request.long_poll_timeout_ms / 1000.0, MAX_LONG_POLL_S)
            await self._wait_lac_or_drain(ledger_id, request.previous_lac, timeout)
        max_bytes = min(request.max_bytes or DEFAULT_READ_BYTES, MAX_READ_BYTES)
        started = time.monotonic()
        status, records = await self.core.read(
            ledger_id, request.first_entry_id, request.last_entry_id, max_bytes
        )
        self.read_latency.observe(time.monotonic() - started)
        if long_poll and status == Status.NO_SUCH_ENTRY:
            # A long poll answers the LAC; the entries are a bonus when they exist.
            status = Status.OK
        return self._read_response(ledger_id, status, records)

    async def WatchLac(
        self, request: pb.WatchLacRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ReadResponse]:
        """A standing long poll: one answer each time the LAC passes the last one sent,
        with the newly confirmed entries held here; the current LAC as a heartbeat when
        nothing happens; the stream ends when the bookie drains. With ``min_interval_ms``
        the answers that bring news are spaced at least that far apart (up to a heartbeat)."""
        ledger_id = request.ledger_id
        if (
            ledger_id < 0
            or request.max_entries < 0
            or request.heartbeat_ms <= 0
            or request.min_interval_ms < 0
        ):
            self.stats.bad_requests += 1
            yield pb.ReadResponse(status=pb.BAD_REQUEST, lac=-1)
            return
        self.stats.lac_watches += 1
        heartbeat = min(max(request.heartbeat_ms / 1000.0, MIN_HEARTBEAT_S), MAX_LONG_POLL_S)
        spacing = min(request.min_interval_ms / 1000.0, heartbeat)
        sent = request.previous_lac
        while not self.draining.is_set():
            if self.core.lac(ledger_id) <= sent:  # else news arrived while the last was sent
                await self._wait_lac_or_drain(ledger_id, sent, heartbeat)
            lac = self.core.lac(ledger_id)
            status, records = Status.OK, list[StoredRecord]()
            if lac > sent and request.max_entries:
                last = min(lac, sent + request.max_entries)
                status, records = await self.core.read(ledger_id, sent + 1, last)
                if status == Status.NO_SUCH_ENTRY:
                    status = Status.OK  # the LAC is the answer; entries are a bonus
            response = self._read_response(ledger_id, status, records)
            # The LAC sent is the one read now, which may be past ``lac``: entries above
            # ``lac`` are simply not brought along.
            news = response.lac > sent
            sent = max(sent, response.lac)
            yield response
            if news and spacing > 0 and not self.draining.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.draining.wait(), spacing)

    def _read_response(
        self, ledger_id: int, status: Status, records: list[StoredRecord]
    ) -> pb.ReadResponse:
        self.stats.read_entries += len(records)
        self.stats.read_bytes += sum(len(r.data) for r in records)
        return pb.ReadResponse(
            status=wire_status(status),
            entries=[
                pb.Entry(
                    ledger_id=ledger_id,
                    entry_id=r.entry_id,
                    lac=r.lac,
                    data=r.data,
                    digest=r.digest,
                )
                for r in records
            ],
            lac=self.core.lac(ledger_id),
            fenced=self.core.is_fenced(ledger_id),
        )

    async def _wait_lac_or_drain(self, ledger_id: int, previous_lac: int, limit_s: float) -> None:
        # A drain answers held long polls at once (with the current LAC) instead of letting
        # the shutdown grace period cancel them.
        if self.draining.is_set():
            return
        poll = asyncio.ensure_future(self.core.wait_lac(ledger_id, previous_lac, limit_s))
        drained = asyncio.ensure_future(self.draining.wait())
        try:
            await asyncio.wait({poll, drained}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            poll.cancel()
            drained.cancel()

    async def ReadLac(
        self, request: pb.ReadLacRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReadLacResponse:
        """The LAC this bookie knows and its last stored entry of the ledger."""
        ledger_id = request.ledger_id
        if ledger_id < 0:
            self.stats.bad_requests += 1
            return pb.ReadLacResponse(status=pb.BAD_REQUEST, lac=-1, last_entry_id=-1)
        lac = self.core.lac(ledger_id)
        last = self.core.last_entry_id(ledger_id)
        # Reading the last entry also tells an unknown ledger (NO_SUCH_LEDGER) from a
        # known one without entries (NO_SUCH_ENTRY, e.g. fenced before any add).
        status, records = await self.core.read(ledger_id, max(last, 0), max(last, 0))
        if last < 0:
            return pb.ReadLacResponse(status=wire_status(status), lac=lac, last_entry_id=-1)
        response = pb.ReadLacResponse(status=pb.OK, lac=lac, last_entry_id=last)
        if status == Status.OK and records:
            r = records[0]
            response.last_entry.CopyFrom(
                pb.Entry(
                    ledger_id=ledger_id,
                    entry_id=r.entry_id,
                    lac=r.lac,
                    data=r.data,
                    digest=r.digest,
                )
            )
        return response

    async def Fence(
        self, request: pb.FenceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FenceResponse:
        """Fence the ledger (persisted before the answer); plain adds are refused after."""
        if request.ledger_id < 0 or not _key_ok(request.master_key):
            self.stats.bad_requests += 1
            return pb.FenceResponse(status=pb.BAD_REQUEST, lac=-1, last_entry_id=-1)
        self.stats.fences += 1
        status, lac, last = await self.core.fence(request.ledger_id, request.master_key)
        return pb.FenceResponse(status=wire_status(status), lac=lac, last_entry_id=last)

    async def Info(
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.InfoResponse:
        """Identity, disk space, limits and journal counters of the bookie."""
        usage = shutil.disk_usage(self.config.data_dir)
        core_stats = self.core.stats
        return pb.InfoResponse(
            bookie_id=self.config.bookie_id,
            instance_id=self.instance_id,
            read_only=self.core.read_only,
            free_disk_bytes=usage.free,
            total_disk_bytes=usage.total,
            version=__version__,
            max_entry_bytes=self.config.max_entry_bytes,
            journal_syncs=int(core_stats.journal_syncs),
            journal_groups=int(core_stats.journal_groups),
            native_port=self.native_port,
            native_socket=self.native_socket,
            rack=self.config.rack,
            latencies=[
                pb.StageLatency(stage=stage, counts=counts)
                for stage, counts in self.core.latencies.counts.items()
            ],
        )

    async def ListLedgers(
        self, request: pb.ListLedgersRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListLedgersResponse:
        """Ids of the ledgers stored on this bookie."""
        return pb.ListLedgersResponse(ledger_ids=sorted(self.core.ledgers()))

    async def ListEntries(
        self, request: pb.ListEntriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListEntriesResponse:
        """The entries of a range of the ledger held here, as ranges, from the index and
        the write cache alone (no entry is read); authorised as reads are (the port's
        bearer token)."""
        self.stats.entry_lists += 1
        first, last = request.first_entry_id, request.last_entry_id
        if request.ledger_id < 0 or first < 0 or last < first:
            self.stats.bad_requests += 1
            return pb.ListEntriesResponse(status=pb.BAD_REQUEST, covered_to=-1)
        status, ranges = await self.core.held_entries(request.ledger_id, first, last)
        covered_to = last
        if len(ranges) > MAX_LISTED_RANGES:
            ranges = ranges[:MAX_LISTED_RANGES]
            covered_to = ranges[-1][1]
        return pb.ListEntriesResponse(
            status=wire_status(status),
            ranges=[bound for pair in ranges for bound in pair],
            covered_to=covered_to if status == Status.OK else -1,
        )


__all__ = ["BookieService"]

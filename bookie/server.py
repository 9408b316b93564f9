"""The bookie's gRPC service: adds, reads, fencing, LAC, info; health; admission.

:class:`BookieService` answers the ``walog.bookie.v1.Bookie`` RPCs over a storage core
(bookie/core.py); the add stream lives in bookie/add_stream.py. :class:`BookieServer` owns
the grpc.aio server: TLS, the bearer-token check, message size limits, the standard health
service (SERVING once started, NOT_SERVING while draining) and the graceful drain.

Protocol answers are statuses, never gRPC errors: clients count them (coverage, quorums).
gRPC errors are left for transport problems (bad token, server shutting down).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import shutil
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from bookie.add_stream import AddStream, wire_status
from bookie.config import BookieConfig, parse_listen
from bookie.core import BookieCore
from bookie.native import NativeServer
from bookie.security import (
    TokenAuthInterceptor,
    read_token,
    server_credentials,
    server_ssl_context,
)
from bookie.storage import StoredRecord
from walog import __version__
from walog.digest import MASTER_KEY_BYTES
from walog.proto import bookie_pb2 as pb
from walog.proto import bookie_pb2_grpc as pb_grpc
from walog.transport.base import Status

log = structlog.get_logger("bookie.server")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""gRPC message limit both ways: a batched frame holds many entries."""
DEFAULT_READ_BYTES = 4 * 1024 * 1024
"""A range read answers at most this many payload bytes unless the request asks less."""
MAX_READ_BYTES = 32 * 1024 * 1024
"""A range read answers at most this many payload bytes, whatever the request asks, so the
answer stays under the message limit (a single entry is always served)."""
MAX_LONG_POLL_S = 600.0
"""Longest long poll a bookie holds, whatever the client asks."""
MIN_HEARTBEAT_S = 0.05
"""Shortest heartbeat interval of a LAC watch, whatever the client asks."""
SERVICE_NAME = "walog.bookie.v1.Bookie"


@dataclasses.dataclass
class ServiceStats:
    """Counters of the service since start (exported on the metrics endpoint)."""

    adds: int = 0
    add_bytes: int = 0
    failed_adds: int = 0
    rejected_adds: int = 0
    bad_requests: int = 0
    forces: int = 0
    reads: int = 0
    read_entries: int = 0
    long_polls: int = 0
    lac_watches: int = 0
    fences: int = 0
    add_streams: int = 0


class Admission:
    """A bound on the payload bytes of adds accepted but not answered yet.

    Args:
        limit: the most bytes in flight; above it adds are answered TOO_MANY_REQUESTS.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def try_acquire(self, size: int) -> bool:
        """Take ``size`` bytes if they fit under the limit, or if nothing is in flight (a
        batch larger than the limit must not be refused forever)."""
        if self.in_flight and self.in_flight + size > self.limit:
            return False
        self.in_flight += size
        return True

    def release(self, size: int) -> None:
        """Give back bytes taken by :meth:`try_acquire`."""
        self.in_flight -= size


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

    def open_add_stream(self) -> AddStream:
        """A new add stream of this service (either port's; see bookie/add_stream.py)."""
        self.stats.add_streams += 1
        return AddStream(self, self._mark_write)

    async def Add(
        self, request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.AddResponseFrame]:
        """Bidirectional add stream (see bookie/add_stream.py)."""
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
            # Recovery reads are fencing reads (seed 002): the fence is persisted before
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
        status, records = await self.core.read(
            ledger_id, request.first_entry_id, request.last_entry_id, max_bytes
        )
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


class BookieServer:
    """The gRPC server and the native listener of one bookie: bind, serve, drain.

    Args:
        config: the bookie's settings (address, TLS, token, limits).
        core: the opened storage core.
        instance_id: the cookie's instance id.
    """

    def __init__(self, config: BookieConfig, core: BookieCore, instance_id: str) -> None:
        self.config = config
        self.service = BookieService(core, config, instance_id)
        self.health = health_aio.HealthServicer()
        interceptors = []
        token = read_token(config.auth_token_file) if config.auth_token_file else None
        if token is not None:
            interceptors.append(TokenAuthInterceptor(token))
        self._native: NativeServer | None = None
        if config.native_port >= 0:
            self._native = NativeServer(
                self.service, token=token, ssl_context=server_ssl_context(config)
            )
        self._server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # Without this two bookies could bind the same port and split its traffic.
                ("grpc.so_reuseport", 0),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 5000),
            ],
        )
        pb_grpc.add_BookieServicer_to_server(self.service, self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        self.port = 0

    async def start(self) -> None:
        """Bind the port, start serving and report SERVING on the health service.

        Raises:
            OSError: the address cannot be bound (in use, not local, no permission).
        """
        credentials = server_credentials(self.config)
        try:
            if credentials is None:
                self.port = self._server.add_insecure_port(self.config.listen)
            else:
                self.port = self._server.add_secure_port(self.config.listen, credentials)
        except RuntimeError as exc:
            raise OSError(
                errno.EADDRINUSE, f"cannot listen on {self.config.listen} (in use?): {exc}"
            ) from exc
        if self.port == 0:
            raise OSError(errno.EADDRINUSE, f"cannot listen on {self.config.listen} (in use?)")
        if self._native is not None:
            host, _ = parse_listen(self.config.listen)
            try:
                self.service.native_port = await self._native.start(host, self.config.native_port)
            except OSError as exc:
                raise OSError(
                    exc.errno, f"cannot listen on native port {self.config.native_port}: {exc}"
                ) from exc
            path = self.config.native_socket_path
            if path is not None:
                try:
                    self.service.native_socket = await self._native.start_unix(path) or ""
                except OSError as exc:
                    # Local clients use the native port instead: a warning, not a failure.
                    log.warning("native Unix socket not opened", path=str(path), error=str(exc))
        await self._server.start()
        for service in ("", SERVICE_NAME):
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "bookie serving",
            listen=self.config.listen,
            native_port=self.service.native_port or None,
            native_socket=self.service.native_socket or None,
            tls=self.config.tls_enabled,
            event_loop=type(asyncio.get_running_loop()).__module__.partition(".")[0],
        )

    async def mark_not_serving(self) -> None:
        """Report NOT_SERVING on the health service (first step of a clean shutdown)."""
        await self.health.enter_graceful_shutdown()

    async def drain(self) -> None:
        """End add streams once their accepted adds are answered, refuse new calls, and
        stop within the drain timeout."""
        await self.health.enter_graceful_shutdown()
        self.service.draining.set()
        if self._native is not None:
            await asyncio.gather(
                self._server.stop(self.config.drain_timeout),
                self._native.drain(self.config.drain_timeout),
            )
        else:
            await self._server.stop(self.config.drain_timeout)
        try:
            await asyncio.wait_for(self.service.wait_orphans(), self.config.drain_timeout)
        except TimeoutError:
            log.warning("adds still unanswered after the drain timeout")

    async def stop_now(self) -> None:
        """Stop at once (start failed part-way)."""
        if self._native is not None:
            self._native.stop_now()
        await self._server.stop(None)


__all__ = ["Admission", "BookieServer", "BookieService", "ServiceStats"]

"""The bookie's front ends: the gRPC server and the native listener, bound, served, drained.

:class:`BookieServer` owns the grpc.aio server (TLS, the bearer-token check, message size
limits, the standard health service: SERVING once started, NOT_SERVING while draining) and
the native listener (bookie/server/native_port.py); both call the same :class:`BookieService`
(bookie/server/service.py).
"""

from __future__ import annotations

import asyncio
import errno

import grpc
import grpc.aio
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from bookie.config import BookieConfig, parse_listen
from bookie.server.health import WRITES_SERVICE, BookieState
from bookie.server.native_port import NativeServer
from bookie.server.security import (
    BearerTokens,
    ServerCertificates,
    TokenAuthInterceptor,
    server_certificates,
)
from bookie.server.service import BookieService
from bookie.storage.engine import BookieCore
from walog.wire.limits import MAX_MESSAGE_BYTES
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

log = structlog.get_logger("bookie.server.grpc_port")

SERVICE_NAME = "walog.bookie.v1.Bookie"
MAX_CONCURRENT_STREAMS = 256
"""gRPC streams (calls) one connection may have open at once."""
"""The gRPC service's name, as the health service reports it."""


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
        self.certificates: ServerCertificates | None = server_certificates(config)
        """The TLS certificates in force (None without TLS); SIGHUP reloads them."""
        self.tokens: BearerTokens | None = None
        """The bearer tokens in force (None without ``--auth-token-file``)."""
        if config.auth_token_file is not None:
            self.tokens = BearerTokens(config.auth_token_file, config.auth_token_grace_s)
            interceptors.append(TokenAuthInterceptor(self.tokens))
        self._native: NativeServer | None = None
        if config.native_port >= 0:
            self._native = NativeServer(
                self.service,
                tokens=self.tokens,
                ssl_context=self.certificates.ssl_context if self.certificates else None,
                max_connections=config.max_connections,
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
                # Streams one client connection may hold open at once (a client needs one
                # per ledger it writes and a few calls): more wait for a free one.
                ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
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
        try:
            if self.certificates is None:
                self.port = self._server.add_insecure_port(self.config.listen)
            else:
                credentials = self.certificates.grpc_credentials()
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
        # Not writable until registered: bookie/server/health.py keeps this one up to date.
        await self.health.set(WRITES_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        log.info(
            "bookie serving",
            listen=self.config.listen,
            native_port=self.service.native_port or None,
            native_socket=self.service.native_socket or None,
            tls=self.config.tls_enabled,
            event_loop=type(asyncio.get_running_loop()).__module__.partition(".")[0],
        )

    async def apply_state(self, state: BookieState) -> None:
        """Bring the gRPC health statuses in line with ``state`` (see bookie/server/health.py)."""
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        ready = state in (BookieState.WRITABLE, BookieState.READ_ONLY, BookieState.STARTING)
        for service in ("", SERVICE_NAME):
            await self.health.set(service, serving if ready else not_serving)
        writable = state is BookieState.WRITABLE
        await self.health.set(WRITES_SERVICE, serving if writable else not_serving)

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
                self._server.stop(self.config.drain_timeout_s),
                self._native.drain(self.config.drain_timeout_s),
            )
        else:
            await self._server.stop(self.config.drain_timeout_s)
        try:
            await asyncio.wait_for(self.service.wait_orphans(), self.config.drain_timeout_s)
        except TimeoutError:
            log.warning("adds still unanswered after the drain timeout")

    async def stop_now(self) -> None:
        """Stop at once (start failed part-way)."""
        if self._native is not None:
            self._native.stop_now()
        await self._server.stop(None)


__all__ = ["SERVICE_NAME", "BookieServer"]

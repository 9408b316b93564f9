"""Which transport carries a bookie's calls: its native port when it has one, else gRPC.

:class:`NativeRoute` asks the bookie's ``Info`` (over gRPC) for its native port, opens one
native connection to that port on the host of the bookie id and keeps it; a broken one is
replaced on the next call, the port asked anew (a restarted bookie may listen on another).
A bookie without a native port is used over gRPC from then on; a native port that cannot
be reached is skipped for ``NATIVE_RETRY_S`` seconds, with a warning, and gRPC carries the
calls meanwhile. A bookie that refuses the credentials fails the call either way.

A bookie whose id names the loopback interface and that announces a Unix socket
(``InfoResponse.native_socket``; never with TLS) is reached through that socket instead of
the port: the same frames without TCP's work per message. The socket is used only once
``Info`` asked through it names the same bookie and instance as ``Info`` over gRPC.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Awaitable, Callable

import grpc

from walog._loggers import get_logger
from walog.config import ClientConfig
from walog.errors import BookieUnavailableError, UnauthorizedError
from walog.transport.codec import translate_rpc_error
from walog.transport.native import NativeConnection
from walog.wire.frames import Method
from walog.wire.proto import bookie_pb2 as pb

NATIVE_RETRY_S = 5.0
"""After a bookie's native port could not be reached, use gRPC this long before trying it again."""

log = get_logger("walog.transport")


class NativeRoute:
    """The native connection to one bookie, opened when first needed.

    Args:
        bookie_id: the bookie's id (``HOST:PORT`` of its gRPC port).
        config: the client settings (``native_transport``, ``timeouts.read``).
        ask_info: the bookie's ``Info`` over gRPC (raises ``grpc.RpcError``).
        token: the bearer token for the HELLO, or None.
        ssl_context: TLS settings, or None for plaintext.
        server_name: the name to check in the bookie's certificate, if not its host.
    """

    def __init__(
        self,
        bookie_id: str,
        config: ClientConfig,
        ask_info: Callable[[], Awaitable[pb.InfoResponse]],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
    ) -> None:
        self.bookie_id = bookie_id
        self._config = config
        self._ask_info = ask_info
        self._token = token
        self._ssl = ssl_context
        self._server_name = server_name
        self._native: NativeConnection | None = None
        self._connecting: asyncio.Future[NativeConnection | None] | None = None
        self._grpc_until = 0.0
        """Until this loop time, calls go over gRPC (no native port, or it failed)."""
        self.closed = False

    @property
    def current(self) -> NativeConnection | None:
        """The open native connection, if there is one now."""
        native = self._native
        return native if native is not None and not native.broken else None

    async def connection(self) -> NativeConnection | None:
        """The native connection, opened when needed; None: use gRPC.

        Raises:
            WalogError: the bookie cannot be reached, or refuses the credentials.
        """
        native = self.current
        if native is not None:
            return native
        if self.closed:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: the client is closed")
        loop = asyncio.get_running_loop()
        if not self._config.native_transport or loop.time() < self._grpc_until:
            return None
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
            self._connecting.add_done_callback(self._connected)
        return await asyncio.shield(self._connecting)

    def close(self) -> None:
        """Close the connection; calls on it fail, later ones find the route closed."""
        self.closed = True
        if self._native is not None:
            self._native.close()
            self._native = None

    def _connected(self, connecting: asyncio.Future[NativeConnection | None]) -> None:
        self._connecting = None
        if not connecting.cancelled() and connecting.exception() is None:
            self._native = connecting.result()

    async def _connect(self) -> NativeConnection | None:
        try:
            info = await self._ask_info()
        except grpc.RpcError as exc:
            raise translate_rpc_error(self.bookie_id, exc) from exc
        if info.native_port <= 0:
            self._grpc_until = float("inf")  # this bookie has no native port
            return None
        host = self.bookie_id.rpartition(":")[0].strip("[]")
        if info.native_socket and self._ssl is None and _is_loopback(host):
            local = await self._open_local(info)
            if local is not None:
                return local
        try:
            connection = await NativeConnection.open(
                f"bookie {self.bookie_id}",
                host,
                info.native_port,
                token=self._token,
                ssl_context=self._ssl,
                server_hostname=self._server_name or host,
                within=self._config.timeouts.read,
            )
        except grpc.RpcError as exc:
            self._raise_if_refused(exc)
            log.warning(
                "native port unreachable, using gRPC",
                bookie=self.bookie_id,
                port=info.native_port,
                error=str(exc),
            )
            self._grpc_until = asyncio.get_running_loop().time() + NATIVE_RETRY_S
            return None
        return self._unless_closed(connection)

    async def _open_local(self, info: pb.InfoResponse) -> NativeConnection | None:
        """The native connection over the bookie's Unix socket, once ``Info`` asked over it
        names the same bookie (the same path on this host could be another bookie's, in
        another container); None: use the port.

        Raises:
            UnauthorizedError: the bookie refuses the token.
        """
        within = self._config.timeouts.read
        try:
            connection = await NativeConnection.open(
                f"bookie {self.bookie_id}",
                "",
                0,
                token=self._token,
                within=within,
                unix_path=info.native_socket,
            )
        except grpc.RpcError as exc:
            self._raise_if_refused(exc)
            log.info("native Unix socket unreachable", bookie=self.bookie_id, error=str(exc))
            return None
        try:
            there = await connection.unary(
                Method.INFO, pb.InfoRequest(), pb.InfoResponse.FromString, within
            )
        except grpc.RpcError as exc:
            connection.close()
            log.info("native Unix socket unusable", bookie=self.bookie_id, error=str(exc))
            return None
        if (there.bookie_id, there.instance_id) != (info.bookie_id, info.instance_id):
            connection.close()
            log.warning(
                "native Unix socket leads to another bookie, using the port",
                bookie=self.bookie_id,
                path=info.native_socket,
                found=there.bookie_id,
            )
            return None
        return self._unless_closed(connection)

    def _raise_if_refused(self, exc: grpc.RpcError) -> None:
        """A bookie that refuses the credentials fails the call whichever way it is reached:
        :class:`UnauthorizedError`; any other failure is left to the caller."""
        error = translate_rpc_error(self.bookie_id, exc)
        if isinstance(error, UnauthorizedError):
            raise error from exc

    def _unless_closed(self, connection: NativeConnection) -> NativeConnection:
        if self.closed:
            connection.close()
            raise BookieUnavailableError(f"bookie {self.bookie_id}: the client is closed")
        return connection


def _is_loopback(host: str) -> bool:
    """Whether ``host`` names this host's loopback interface (the bookie runs here)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["NATIVE_RETRY_S", "NativeRoute"]

"""The bookie's native port: the ``Bookie`` RPCs as frames over TCP or TLS (and a Unix
socket for clients on the same host).

Same service object (bookie/server/service.py), same messages and same answers as the gRPC port
(bookie/server/grpc_port.py); only the carriage differs (walog/wire/frames.py), at a fraction of
gRPC's CPU per message. Each connection starts with a HELLO that carries the bearer token
when the bookie requires one. An add stream is driven by calls
(:meth:`IncomingAddStream.run_direct`): each frame is dispatched as it arrives and each loop turn's
results go out at its end. Other calls run as one task each, at most ``MAX_UNARY_CALLS``
unary ones at a time. While the socket's send buffer is full, answers wait and the
connection is not read: a client that does not read its answers stops being read.
"""

from __future__ import annotations

import asyncio
import collections
import os
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import structlog
from google.protobuf.message import DecodeError, Message

from bookie.server.add_stream import IncomingAddStream
from bookie.server.security import BearerTokens
from bookie.server.service import BookieService
from walog.format_versions import newer_version_message
from walog.wire.frames import (
    NATIVE_VERSION,
    RPC_NAMES,
    Code,
    FrameDecoder,
    FrameError,
    Kind,
    Method,
    encode,
    encode_end,
    encode_status,
    hello_version,
)
from walog.wire.keepalive import keepalive
from walog.wire.proto import bookie_pb2 as pb

log = structlog.get_logger("bookie.server.native_port")

_UNIX_PATH_MAX = 108
"""Bytes in a Unix socket address on Linux, the terminating NUL included."""

MAX_UNARY_CALLS = 32
MAX_ADD_STREAMS = 64
"""Add streams one connection may hold open; a client needs one per ledger it writes at
once, so more is a client opening streams it does not use: the extra ones are refused."""
"""Unary calls one connection may have running; the frames after one that would start
another wait, unread, until one ends (each running call may hold a whole answer)."""
_UNARY = frozenset(
    {
        Method.READ,
        Method.READ_LAC,
        Method.FENCE,
        Method.INFO,
        Method.LIST_LEDGERS,
        Method.LIST_ENTRIES,
    }
)
_NO_CONTEXT: Any = None
"""The service's handlers take a gRPC context and do not use it."""
_REQUESTS: dict[int, Callable[[bytes], Message]] = {
    Method.READ: pb.ReadRequest.FromString,
    Method.READ_LAC: pb.ReadLacRequest.FromString,
    Method.WATCH_LAC: pb.WatchLacRequest.FromString,
    Method.FENCE: pb.FenceRequest.FromString,
    Method.INFO: pb.InfoRequest.FromString,
    Method.LIST_LEDGERS: pb.ListLedgersRequest.FromString,
    Method.LIST_ENTRIES: pb.ListEntriesRequest.FromString,
}


class _Connection(asyncio.Protocol):
    """One client connection: handshake, calls by id, flow control both ways."""

    def __init__(self, server: NativeServer) -> None:
        self._server = server
        self._service = server.service
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._greeted = False
        self.calls: dict[int, asyncio.Task[None]] = {}
        """The running calls by id, add streams aside."""
        self.adds: dict[int, tuple[IncomingAddStream, asyncio.Future[None]]] = {}
        """The running add streams by id, each with a future done when it ends."""
        self._last_call = 0
        self._unary: set[int] = set()
        """Ids of the running unary calls."""
        self._backlog: collections.deque[tuple[int, Kind, int, bytes]] = collections.deque()
        """Frames received and not handled yet: behind a unary call over the limit."""
        self._writable = asyncio.Event()
        self._writable.set()
        self._paused = False
        self.closed = asyncio.Event()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's are not subclasses
        self._transport = transport
        if len(self._server.connections) >= self._server.max_connections:
            # A bounded number of connections bounds the memory they hold; well-behaved
            # clients keep one per bookie. The client sees the connection closed at once.
            self._server.refused_connections += 1
            transport.abort()
            return
        self._server.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            keepalive(sock)  # a client gone without a word frees its calls

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        for task in self.calls.values():
            task.cancel()
        for call_id in list(self.adds):
            self._end_add(call_id)
        self._backlog.clear()
        self._writable.set()  # nothing waits on a dead socket
        self.closed.set()

    def pause_writing(self) -> None:
        self._writable.clear()
        self._pace()

    def resume_writing(self) -> None:
        self._writable.set()
        self._pace()
        for stream, _ in list(self.adds.values()):
            stream.flush()

    def data_received(self, data: bytes) -> None:
        try:
            self._backlog.extend(self._decoder.feed(data))
        except FrameError as exc:
            self._broken(exc)
            return
        self._handle_backlog()

    def _broken(self, exc: FrameError) -> None:
        """The client broke the frame protocol: drop the connection."""
        log.warning("native protocol error", error=str(exc))
        self.abort()

    # -- flow control -------------------------------------------------------------------

    def _handle_backlog(self) -> None:
        backlog = self._backlog
        try:
            while backlog:
                call_id, kind, method, body = backlog[0]
                if (
                    len(self._unary) >= MAX_UNARY_CALLS
                    and kind == Kind.DATA
                    and method in _UNARY
                    and call_id > self._last_call
                ):
                    break  # one more unary call would be over the limit
                backlog.popleft()
                self._frame(call_id, kind, method, body)
        except FrameError as exc:
            self._broken(exc)
            return
        self._pace()

    def _pace(self) -> None:
        """Read while answers can be written and no frame waits; else stop reading."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        pause = not self._writable.is_set() or bool(self._backlog)
        if pause != self._paused:
            self._paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    # -- frames -------------------------------------------------------------------------

    def _frame(self, call_id: int, kind: Kind, method: int, body: bytes) -> None:
        if not self._greeted:
            self._hello(kind, body)
            return
        if kind == Kind.DATA:
            add = self.adds.get(call_id)
            if add is not None:
                add[0].feed(_add_frame(body))
            elif call_id > self._last_call:  # ids only grow: a late frame opens nothing
                self._last_call = call_id
                self._start(call_id, method, body)
        elif kind == Kind.END:
            add = self.adds.get(call_id)
            if add is not None:
                add[0].end_input()
        elif kind == Kind.CANCEL:
            task = self.calls.get(call_id)
            if task is not None:
                task.cancel()
            if call_id in self.adds:
                self._end_add(call_id)
        else:
            raise FrameError(f"unexpected {kind.name} frame")

    def _hello(self, kind: Kind, body: bytes) -> None:
        hello = hello_version(body) if kind == Kind.HELLO else None
        if hello is None:
            raise FrameError("the connection did not start with a walog HELLO")
        version, token = hello
        if version > NATIVE_VERSION:
            what = f"the client's native protocol (walog-native/{version})"
            reason = newer_version_message(what, version, NATIVE_VERSION, "the bookie")
            self._send(encode(0, Kind.HELLO, 0, encode_status(Code.UNIMPLEMENTED, reason)))
            self.close()
            return
        tokens = self._server.tokens
        if tokens is not None and not tokens.accepts(token):
            refusal = encode_status(Code.UNAUTHENTICATED, "missing or wrong bearer token")
            self._send(encode(0, Kind.HELLO, 0, refusal))
            self.close()
            return
        self._greeted = True
        self._send(encode(0, Kind.HELLO, 0, encode_status(Code.OK)))

    def _start(self, call_id: int, method: int, body: bytes) -> None:
        if self._service.draining.is_set():
            # As the gRPC port: a bookie shutting down starts no new calls.
            self._send(encode_end(call_id, Code.UNAVAILABLE, "the bookie is shutting down"))
            return
        if method == Method.ADD:
            if len(self.adds) >= MAX_ADD_STREAMS:
                self._send(
                    encode_end(
                        call_id,
                        Code.RESOURCE_EXHAUSTED,
                        f"more than {MAX_ADD_STREAMS} add streams open on one connection",
                    )
                )
                return
            frame = _add_frame(body)
            stream = self._service.open_add_stream()
            self.adds[call_id] = (stream, asyncio.get_running_loop().create_future())
            stream.run_direct(
                sink=lambda answer: self._send(
                    encode(call_id, Kind.DATA, 0, answer.SerializeToString())
                ),
                ready=self._writable.is_set,
                finished=lambda: self._end_add(call_id, Code.OK),
            )
            stream.feed(frame)
            return
        if method in _REQUESTS:
            try:
                request = _REQUESTS[method](body)
            except DecodeError:
                self._send(encode_end(call_id, Code.INVALID_ARGUMENT, "malformed request"))
                return
            handler = getattr(self._service, RPC_NAMES[Method(method)])
            if method == Method.WATCH_LAC:
                work = self._stream_call(call_id, handler(request, _NO_CONTEXT))
            else:
                self._unary.add(call_id)
                work = self._unary_call(call_id, handler(request, _NO_CONTEXT))
        else:
            self._send(encode_end(call_id, Code.UNIMPLEMENTED, f"unknown method {method}"))
            return
        task = asyncio.get_running_loop().create_task(work)
        self.calls[call_id] = task
        task.add_done_callback(lambda _: self._ended(call_id))

    def _ended(self, call_id: int) -> None:
        self.calls.pop(call_id, None)
        if call_id in self._unary:
            self._unary.discard(call_id)
            if self._backlog:
                self._handle_backlog()

    def _end_add(self, call_id: int, code: Code | None = None) -> None:
        """Forget an add stream; with ``code``, tell the client it ended."""
        add = self.adds.pop(call_id, None)
        if add is None:
            return
        stream, done = add
        stream.abandon()
        done.set_result(None)
        if code is not None:
            self._send(encode_end(call_id, code))

    # -- calls --------------------------------------------------------------------------

    async def _unary_call(self, call_id: int, answer: Any) -> None:
        try:
            response = await answer
            if not self._writable.is_set():
                await self._writable.wait()
        except asyncio.CancelledError:
            return
        except Exception as exc:
            log.exception("native call failed", call_id=call_id)
            self._send(encode_end(call_id, Code.INTERNAL, repr(exc)))
            return
        self._send(
            encode(call_id, Kind.DATA, 0, response.SerializeToString())
            + encode_end(call_id, Code.OK)
        )

    async def _stream_call(self, call_id: int, answers: AsyncIterator[Message]) -> None:
        try:
            async for response in answers:
                if not self._writable.is_set():
                    await self._writable.wait()
                self._send(encode(call_id, Kind.DATA, 0, response.SerializeToString()))
        except asyncio.CancelledError:
            return
        except Exception as exc:
            log.exception("native stream failed", call_id=call_id)
            self._send(encode_end(call_id, Code.INTERNAL, repr(exc)))
            return
        self._send(encode_end(call_id, Code.OK))

    # -- plumbing -----------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def close(self) -> None:
        """Close once written."""
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close at once."""
        if self._transport is not None:
            self._transport.abort()


def _add_frame(body: bytes) -> pb.AddFrame:
    try:
        return pb.AddFrame.FromString(body)
    except DecodeError as exc:
        raise FrameError(f"malformed AddFrame: {exc}") from exc


class NativeServer:
    """The native listener of one bookie.

    Args:
        service: the bookie service that answers the calls (shared with the gRPC port).
        tokens: the bearer tokens clients may present, or None (no token needed).
        ssl_context: TLS settings, or None for plaintext.
        max_connections: connections served at once (TCP and Unix socket together).
    """

    def __init__(
        self,
        service: BookieService,
        *,
        tokens: BearerTokens | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 1024,
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.max_connections = max_connections
        """Connections served at once; more are closed as they arrive."""
        self.refused_connections = 0
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None
        self._unix: asyncio.Server | None = None
        self._unix_path: Path | None = None
        self.connections: set[_Connection] = set()
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: any free port); returns the port.

        Raises:
            OSError: the port cannot be bound.
        """
        loop = asyncio.get_running_loop()

        async def listen(port: int) -> asyncio.Server:
            return await loop.create_server(
                lambda: _Connection(self), host, port, ssl=self._ssl, reuse_address=True
            )

        server = await listen(port)
        ports = sorted({sock.getsockname()[1] for sock in server.sockets})
        if len(ports) > 1:  # a name with several addresses got a free port for each
            server.close()
            await server.wait_closed()
            server = await listen(ports[0])
        self._server = server
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def start_unix(self, path: Path) -> str | None:
        """Listen on the Unix socket ``path`` too (the same calls and token, no TLS);
        returns the path, or None when it cannot serve there: a path too long for a socket
        address, or taken by something other than a stale socket of an earlier run."""
        if len(os.fsencode(path)) >= _UNIX_PATH_MAX:
            log.info("no native Unix socket: path too long", path=str(path))
            return None
        found = await asyncio.to_thread(_what_is, path)
        if found == "socket":
            if await _answers(path):
                log.warning("no native Unix socket: another process serves it", path=str(path))
                return None
            # Left by a bookie that did not stop cleanly.
            await asyncio.to_thread(path.unlink, missing_ok=True)
        elif found is not None:
            log.warning("no native Unix socket: the path is taken", path=str(path))
            return None
        loop = asyncio.get_running_loop()
        self._unix = await loop.create_unix_server(lambda: _Connection(self), str(path))
        self._unix_path = path
        # Whoever may reach the TCP port on this host may use the socket (the token, if
        # any, is asked for all the same).
        os.chmod(path, 0o666)
        return str(path)

    async def drain(self, grace: float) -> None:
        """Stop accepting; let running calls end (the service's drain ends add streams and
        LAC watches) for up to ``grace`` seconds; then close every connection."""
        self._stop_listening()
        calls: list[asyncio.Future[Any]] = []
        for connection in self.connections:
            calls += connection.calls.values()
            calls += (done for _, done in connection.adds.values())
        if calls:
            await asyncio.wait(calls, timeout=grace)
        self.stop_now()

    def stop_now(self) -> None:
        """Close the listeners and every connection at once."""
        self._stop_listening()
        for connection in list(self.connections):
            connection.abort()

    def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._unix is not None:
            self._unix.close()
            self._unix = None
            if self._unix_path is not None:
                self._unix_path.unlink(missing_ok=True)


def _what_is(path: Path) -> str | None:
    """``"socket"``, ``"other"`` or None (nothing there)."""
    if path.is_socket():
        return "socket"
    return "other" if path.exists() or path.is_symlink() else None


async def _answers(path: Path) -> bool:
    """Whether a process accepts connections on the Unix socket ``path``."""
    try:
        _, writer = await asyncio.open_unix_connection(str(path))
    except OSError:
        return False
    writer.close()
    return True


__all__ = ["NativeServer"]

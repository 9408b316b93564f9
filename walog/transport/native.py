"""The client end of a bookie's native port (frames: :mod:`walog.wire.frames`).

:class:`NativeConnection` is one TCP or TLS connection to a bookie; :class:`NativeCall` one
call on it, with the calls' interface of grpc.aio that the rest of the transport uses
(``write``, ``read`` returning ``grpc.aio.EOF`` at the end, ``done_writing``, ``cancel``).
Failures are :class:`NativeCallError`, a ``grpc.RpcError`` with a ``grpc.StatusCode``, so
:func:`walog.transport.codec.translate_rpc_error` reads both transports' failures alike.
A lost connection fails every call on it; its owner opens a new one for the next call.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import ssl
from collections.abc import Callable, Sequence
from typing import Any, cast

import grpc
import grpc.aio
from google.protobuf.message import Message

from walog.wire.frames import (
    HELLO_MAGIC,
    Code,
    FrameDecoder,
    FrameError,
    Kind,
    Method,
    decode_status,
    encode,
    frame_header,
)
from walog.wire.keepalive import keepalive

Deserializer = Callable[[bytes], Any]
EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]
"""What ``read`` returns once a call ended normally: grpc.aio's end-of-stream value."""


class NativeCallError(grpc.RpcError):
    """A native call or connection failed (the transport's failure, not a bookie status)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        """What kind of failure, named as gRPC names them."""
        return self._code

    def details(self) -> str:
        """What happened."""
        return self._details


def _error(code: Code, details: str) -> NativeCallError:
    return NativeCallError(grpc.StatusCode[code.name], details)


class NativeCall:
    """One call: messages out (``write``), messages in (``read``), then its end."""

    def __init__(
        self, connection: NativeConnection, call_id: int, method: Method, decode: Deserializer
    ) -> None:
        self._connection = connection
        self.call_id = call_id
        self._method = method
        self._decode = decode
        self._messages: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._finished = False
        self._error: NativeCallError | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._on_message: Callable[[Any], None] | None = None
        self._on_end: Callable[[NativeCallError | None], None] | None = None

    def subscribe(
        self,
        on_message: Callable[[Any], None],
        on_end: Callable[[NativeCallError | None], None],
    ) -> None:
        """Have each message decoded and handed to ``on_message`` as it arrives, and the
        call's end (None: normal) to ``on_end``, instead of :meth:`read`: no task wakes up
        per message. A message that does not decode ends the call (INTERNAL)."""
        self._on_message = on_message
        self._on_end = on_end
        while self._messages and not self._finished:
            self.receive(self._messages.popleft())
        if self._finished:
            on_end(self._error)

    @property
    def writable(self) -> bool:
        """Whether :meth:`send` may be called now: the call is open and the socket's send
        buffer has room."""
        return not self._finished and self._connection.is_writable

    def send(self, message: bytes, *, last: bool = False) -> None:
        """Send ``message`` now, whatever the socket's buffer holds (requests of unary and
        server-streaming calls); ``last``: and half-close."""
        self.send_parts((message,), last=last)

    def send_parts(self, parts: Sequence[bytes], *, last: bool = False) -> None:
        """Like :meth:`send`, for the message that is the concatenation of ``parts``: they
        go to the socket as they are, never joined (an add frame's batches)."""
        if self._finished:
            raise self._error or _error(Code.CANCELLED, "the call is over")
        size = sum(len(part) for part in parts)
        frame = [frame_header(self.call_id, Kind.DATA, self._method, size), *parts]
        if last:
            frame.append(encode(self.call_id, Kind.END, self._method))
        self._connection.send_parts(frame)

    async def write(self, message: bytes) -> None:
        """Send one message, waiting while the socket's send buffer is full."""
        await self._connection.writable()
        self.send(message)

    async def wait_writable(self) -> None:
        """Return once the socket's send buffer has room (or the connection is gone)."""
        await self._connection.writable()

    async def done_writing(self) -> None:
        """Tell the bookie no more messages come on this call."""
        if not self._finished:
            self._connection.send(encode(self.call_id, Kind.END, self._method))

    async def read(self) -> Any:
        """The next message, or ``grpc.aio.EOF`` once the bookie ended the call normally.

        Raises:
            NativeCallError: the call failed, was cancelled or timed out.
        """
        while not self._messages:
            if self._finished:
                if self._error is not None:
                    raise self._error
                return EOF
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._decode(self._messages.popleft())

    def cancel(self) -> bool:
        """Drop the call: the bookie is told, a waiting ``read`` fails with CANCELLED."""
        if self._finished:
            return False
        self._connection.send(encode(self.call_id, Kind.CANCEL, self._method))
        self.finish(_error(Code.CANCELLED, "cancelled by the client"))
        return True

    def expire_after(self, seconds: float) -> None:
        """Fail the call with DEADLINE_EXCEEDED unless it ends within ``seconds``."""
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire, seconds)

    def _expire(self, seconds: float) -> None:
        if not self._finished:
            self.finish(_error(Code.DEADLINE_EXCEEDED, f"no answer within {seconds:g} s"))
            self.drop_connection()

    def drop_connection(self) -> None:
        """The bookie left this call unanswered too long: close the whole connection (its
        other calls fail too), so that the next call connects anew instead of waiting on a
        peer that may be gone without a word."""
        self._connection.close()

    # -- from the connection ------------------------------------------------------------

    def receive(self, body: bytes) -> None:
        """A message from the bookie."""
        on_message = self._on_message
        if on_message is None:
            self._messages.append(body)
            self._wake()
            return
        try:
            message = self._decode(body)
        except Exception as exc:
            self._connection.send(encode(self.call_id, Kind.CANCEL, self._method))
            self.finish(_error(Code.INTERNAL, f"undecodable message: {exc!r}"))
            return
        on_message(message)

    def finish(self, error: NativeCallError | None) -> None:
        """The call is over (``error`` None: normally)."""
        if self._finished:
            return
        self._finished = True
        self._error = error
        if self._timer is not None:
            self._timer.cancel()
        self._connection.forget(self.call_id)
        self._wake()
        if self._on_end is not None:
            self._on_end(error)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class NativeConnection(asyncio.Protocol):
    """One connection to a bookie's native port. Open with :meth:`open`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._calls: dict[int, NativeCall] = {}
        self._ids = itertools.count(1)
        self._greeted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writable = asyncio.Event()
        self._writable.set()
        self.broken = False
        #: The Unix socket this connection goes through, None for TCP.
        self.unix_path: str | None = None

    @classmethod
    async def open(
        cls,
        name: str,
        host: str,
        port: int,
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        within: float = 10.0,
        unix_path: str | None = None,
    ) -> NativeConnection:
        """Connect (to ``host:port``, or to the Unix socket ``unix_path`` when given), say
        HELLO (with ``token``) and wait for the bookie's answer.

        Raises:
            NativeCallError: UNAVAILABLE when the port cannot be reached in ``within``
                seconds, UNAUTHENTICATED when the bookie refuses the token.
        """
        loop = asyncio.get_running_loop()
        connection = cls(name)
        connection.unix_path = unix_path
        try:
            async with asyncio.timeout(within):
                if unix_path is not None:
                    await loop.create_unix_connection(lambda: connection, unix_path)
                else:
                    await loop.create_connection(
                        lambda: connection,
                        host,
                        port,
                        ssl=ssl_context,
                        server_hostname=server_hostname if ssl_context is not None else None,
                    )
                hello = HELLO_MAGIC + (token or "").encode()
                connection.send(encode(0, Kind.HELLO, 0, hello))
                await connection._greeted
        except TimeoutError:
            connection.close()
            raise _error(Code.UNAVAILABLE, f"{name}: no HELLO within {within:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            connection.close()
            raise _error(Code.UNAVAILABLE, f"{name}: cannot connect: {exc}") from exc
        except NativeCallError:
            connection.close()
            raise
        return connection

    def call(self, method: Method, decode: Deserializer) -> NativeCall:
        """A new call; it starts with its first message."""
        call = NativeCall(self, next(self._ids), method, decode)
        if self.broken:
            call.finish(_error(Code.UNAVAILABLE, f"{self.name}: the connection is closed"))
        else:
            self._calls[call.call_id] = call
        return call

    async def unary(
        self, method: Method, request: Message, decode: Deserializer, within: float
    ) -> Any:
        """Send ``request``, return the one answer.

        Raises:
            NativeCallError: no answer within ``within`` seconds, or the call failed.
        """
        call = self.call(method, decode)
        call.expire_after(within)
        call.send(request.SerializeToString(), last=True)
        response = await call.read()
        if response is EOF:
            raise _error(Code.INTERNAL, f"{self.name}: the call ended without an answer")
        return response

    async def writable(self) -> None:
        """Return once the socket's send buffer has room."""
        if not self._writable.is_set():
            await self._writable.wait()

    @property
    def is_writable(self) -> bool:
        """Whether the socket's send buffer has room now."""
        return self._writable.is_set()

    def send(self, data: bytes) -> None:
        """Queue ``data`` on the socket (dropped once the connection is closed)."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def send_parts(self, parts: Sequence[bytes]) -> None:
        """Queue ``parts`` on the socket, in order, without joining them (uvloop hands them
        to one vectored write; dropped once the connection is closed)."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.writelines(parts)

    def forget(self, call_id: int) -> None:
        """Stop routing frames to a finished call."""
        self._calls.pop(call_id, None)

    def close(self) -> None:
        """Close the connection; calls on it fail with UNAVAILABLE."""
        if self._transport is not None:
            self._transport.close()
        self._lost(f"{self.name}: the connection is closed")

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's are not subclasses
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            keepalive(sock)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc is not None else ""
        self._lost(f"{self.name}: connection lost{reason}")

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            self._fail_protocol(str(exc))
            return
        calls = self._calls
        for call_id, kind, _method, body in frames:
            if kind == Kind.DATA:
                call = calls.get(call_id)
                if call is not None:
                    call.receive(body)
            elif kind == Kind.END:
                call = calls.get(call_id)
                if call is not None:
                    code, reason = decode_status(body)
                    call.finish(None if code == Code.OK else _error(code, reason))
            elif kind == Kind.HELLO and not self._greeted.done():
                code, reason = decode_status(body)
                if code == Code.OK:
                    self._greeted.set_result(None)
                else:
                    self._greeted.set_exception(_error(code, f"{self.name}: {reason}"))
            else:
                self._fail_protocol(f"unexpected {kind.name} frame")
                return

    def _fail_protocol(self, reason: str) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._lost(f"{self.name}: protocol error: {reason}", Code.INTERNAL)

    def _lost(self, reason: str, code: Code = Code.UNAVAILABLE) -> None:
        self.broken = True
        self._writable.set()  # writers find the connection closed instead of waiting
        if not self._greeted.done():
            self._greeted.set_exception(_error(code, reason))
            self._greeted.exception()  # retrieved: nobody may be waiting any more
        calls, self._calls = list(self._calls.values()), {}
        for call in calls:
            call.finish(_error(code, reason))


__all__ = ["EOF", "NativeCall", "NativeCallError", "NativeConnection"]

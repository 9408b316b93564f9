"""Bookie connections over grpc.aio, with adds batched into frames.

One channel and one ``Add`` bidirectional stream per bookie, opened lazily. Adds, explicit
LAC updates and forces are queued and flushed as :class:`AddFrame` messages of up to
``max_frame_entries`` / ``max_frame_bytes`` whenever the stream can take a message: while one
frame is being written, the next one fills up. There are no flush timers; Python pays per
message, not per byte, so the batching comes from the stream's own back-pressure.

Replies are matched by ``(ledger_id, entry_id)`` (forces by request id). A broken stream
fails every request pending on it with :class:`BookieUnavailableError`; the next request
opens a new stream. When requests are outstanding and the bookie answers none of them for
``timeouts.add`` seconds, the stream fails (the bookie is stuck): one timer per stream, not
per add. Read, ReadLac and Fence are unary calls bounded by
``timeouts.read``; the entries they return have their digests verified here, and a mismatch
is reported as :attr:`Status.DIGEST_MISMATCH` (an *unknown* answer), never as data.

``grpc.RpcError`` is translated into walog errors in this module and nowhere else.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
from collections.abc import Sequence

import grpc
import grpc.aio
import structlog

from walog.digest import entry_digest
from walog.errors import BookieUnavailableError, UnauthorizedError, WalogError
from walog.ledger.context import ClientConfig
from walog.ledger.durability import Durability
from walog.proto import bookie_pb2 as pb
from walog.proto import bookie_pb2_grpc
from walog.transport.base import (
    AddCallback,
    AddReply,
    BookieClient,
    BookiePool,
    FenceReply,
    ForceReply,
    ReadLacReply,
    ReadReply,
    Status,
    StoredEntry,
)
from walog.transport.credentials import TlsConfig, auth_metadata

log = structlog.get_logger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_PB_DURABILITY = {Durability.PERSISTENT: pb.PERSISTENT, Durability.VOLATILE: pb.VOLATILE}
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


def _status(value: int) -> Status:
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


class _AddStream:
    """One ``Add`` stream: the send queue, the requests awaiting replies, the watchdog."""

    def __init__(self, client: GrpcBookieClient, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        self._client = client
        self._call = call
        self._loop = asyncio.get_running_loop()
        self._adds: collections.deque[QueuedAdd] = collections.deque()
        self._lacs: list[tuple[int, int, bytes]] = []
        self._forces: list[tuple[int, int, bytes]] = []
        # The reply to (ledger, entry) goes to the first waiter; a second add of the same
        # entry on this stream (a resend) waits in _more_waiters.
        self._add_waiters: dict[tuple[int, int], AddCallback] = {}
        self._more_waiters: dict[tuple[int, int], collections.deque[AddCallback]] = {}
        self._force_waiters: dict[int, asyncio.Future[ForceReply]] = {}
        # Liveness: requests are outstanding and the bookie answered none of them for
        # ``timeouts.add`` seconds -> the stream (the bookie) has failed.
        self._outstanding = 0
        self._waiting_since = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()
        self.broken = False
        self._sender = self._loop.create_task(self._send_loop())
        self._receiver = self._loop.create_task(self._receive_loop())

    def add(self, add: QueuedAdd, callback: AddCallback) -> None:
        key = (add[0], add[1])
        if key in self._add_waiters:
            self._more_waiters.setdefault(key, collections.deque()).append(callback)
        else:
            self._add_waiters[key] = callback
        self._adds.append(add)
        self._request_sent()
        self._wake.set()

    def lac(self, ledger_id: int, lac: int, master_key: bytes) -> None:
        self._lacs.append((ledger_id, lac, master_key))
        self._wake.set()

    def force(
        self, ledger_id: int, request_id: int, master_key: bytes
    ) -> asyncio.Future[ForceReply]:
        future: asyncio.Future[ForceReply] = self._loop.create_future()
        self._force_waiters[request_id] = future
        self._forces.append((ledger_id, request_id, master_key))
        self._request_sent()
        self._wake.set()
        return future

    # -- timeouts ---------------------------------------------------------------------

    def _request_sent(self) -> None:
        if self._outstanding == 0:
            self._waiting_since = self._loop.time()
            if self._watchdog is None:
                self._watchdog = self._loop.call_at(
                    self._waiting_since + self._client.add_timeout, self._check_progress
                )
        self._outstanding += 1

    def _check_progress(self) -> None:
        self._watchdog = None
        if self._outstanding == 0:
            return
        deadline = self._waiting_since + self._client.add_timeout
        if deadline <= self._loop.time():
            self.fail(f"no answer within {self._client.add_timeout} seconds")
        else:
            self._watchdog = self._loop.call_at(deadline, self._check_progress)

    # -- sending ----------------------------------------------------------------------

    async def _send_loop(self) -> None:
        config = self._client.config
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._adds or self._lacs or self._forces:
                    frame = build_frame(
                        self._adds,
                        self._lacs,
                        self._forces,
                        config.max_frame_entries,
                        config.max_frame_bytes,
                    )
                    await self._call.write(frame)
        except grpc.RpcError as exc:
            error = translate_rpc_error(self._client.bookie_id, exc)
            self.fail(str(error), unauthorized=isinstance(error, UnauthorizedError))
        except Exception as exc:  # the call ended under us (UsageError, InvalidStateError)
            self.fail(f"add stream failed: {exc!r}")

    # -- receiving --------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        try:
            while True:
                frame = await self._call.read()
                if not isinstance(frame, pb.AddResponseFrame):  # grpc.aio.EOF
                    self.fail("the bookie ended the add stream")
                    return
                self._dispatch(frame)
        except grpc.RpcError as exc:
            error = translate_rpc_error(self._client.bookie_id, exc)
            self.fail(str(error), unauthorized=isinstance(error, UnauthorizedError))
        except Exception as exc:  # a malformed reply must not leave adds waiting forever
            self.fail(f"add stream failed: {exc!r}")

    def _dispatch(self, frame: pb.AddResponseFrame) -> None:
        self._waiting_since = self._loop.time()  # the bookie makes progress
        waiters = self._add_waiters
        for result in frame.results:
            key = (result.ledger_id, result.entry_id)
            callback = waiters.pop(key, None)
            if callback is None:
                continue  # an answer to a request this client gave up on
            self._outstanding -= 1
            more = self._more_waiters.get(key)
            if more:
                waiters[key] = more.popleft()
                if not more:
                    del self._more_waiters[key]
            callback(AddReply(_status(result.status), result.last_add_synced))
        for forced in frame.forces:
            force = self._force_waiters.pop(forced.request_id, None)
            if force is None:
                continue
            self._outstanding -= 1
            if not force.done():
                force.set_result(ForceReply(_status(forced.status), forced.last_add_synced))

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
        callbacks = list(self._add_waiters.values())
        callbacks.extend(c for more in self._more_waiters.values() for c in more)
        forces = list(self._force_waiters.values())
        self._add_waiters.clear()
        self._more_waiters.clear()
        self._force_waiters.clear()
        self._adds.clear()
        self._lacs.clear()
        self._forces.clear()
        self._outstanding = 0
        self._call.cancel()
        current = asyncio.current_task()
        for task in (self._sender, self._receiver):
            if task is not current:
                task.cancel()
        # Last: the callbacks may send again, on a new stream.
        for future in forces:
            if not future.done():
                future.set_exception(error_type(message))
        for callback in callbacks:
            callback(error_type(message))


class GrpcBookieClient(BookieClient):
    """The connection to one bookie: a lazily opened channel and add stream."""

    def __init__(
        self,
        bookie_id: str,
        config: ClientConfig,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        server_name: str | None = None,
        auth_token: str | None = None,
    ) -> None:
        self.bookie_id = bookie_id
        self.config = config
        self.add_timeout = config.timeouts.add
        self._credentials = credentials
        self._server_name = server_name
        self._metadata = auth_metadata(auth_token)
        self._channel: grpc.aio.Channel | None = None
        self._stub: bookie_pb2_grpc.BookieAsyncStub | None = None
        self._stream: _AddStream | None = None
        self._request_ids = itertools.count(1)
        self.closed = False

    def _open_stub(self) -> bookie_pb2_grpc.BookieAsyncStub:
        if self.closed:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: the client is closed")
        if self._stub is None:
            options: list[tuple[str, int | str]] = [
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                # A restarted bookie is found again quickly; failures are handled above.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2000),
            ]
            if self._credentials is None:
                self._channel = grpc.aio.insecure_channel(self.bookie_id, options=options)
            else:
                if self._server_name is not None:
                    options.append(("grpc.ssl_target_name_override", self._server_name))
                self._channel = grpc.aio.secure_channel(
                    self.bookie_id, self._credentials, options=options
                )
            self._stub = bookie_pb2_grpc.BookieStub(self._channel)
        assert self._stub is not None
        return self._stub

    def _open_stream(self) -> _AddStream:
        stream = self._stream
        if stream is None or stream.broken:
            call = self._open_stub().Add(metadata=self._metadata)  # type: ignore[call-arg]
            stream = self._stream = _AddStream(self, call)
        return stream

    def stream_broken(self, stream: _AddStream) -> None:
        """Forget a broken stream (called by the stream itself)."""
        if self._stream is stream:
            self._stream = None

    def add(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        data: bytes,
        digest: int,
        master_key: bytes,
        *,
        recovery: bool = False,
        durability: Durability = Durability.PERSISTENT,
    ) -> asyncio.Future[AddReply]:
        """Queue an add on the bookie's stream (see :class:`BookieClient`)."""
        future: asyncio.Future[AddReply] = asyncio.get_running_loop().create_future()

        def resolve(result: AddReply | BaseException) -> None:
            if future.done():
                return
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

        self.add_then(
            ledger_id,
            entry_id,
            lac,
            data,
            digest,
            master_key,
            resolve,
            recovery=recovery,
            durability=durability,
        )
        return future

    def add_then(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        data: bytes,
        digest: int,
        master_key: bytes,
        callback: AddCallback,
        *,
        recovery: bool = False,
        durability: Durability = Durability.PERSISTENT,
    ) -> None:
        """Queue an add; ``callback`` gets the reply straight from the stream's reply
        handling (no future, no scheduled callback per add), or the error that ended it."""
        try:
            stream = self._open_stream()
        except WalogError as exc:
            # Never call back from inside the caller: it may still be setting up.
            asyncio.get_running_loop().call_soon(callback, exc)
            return
        stream.add(
            (
                ledger_id,
                entry_id,
                lac,
                data,
                digest,
                master_key,
                recovery,
                _PB_DURABILITY[durability],
            ),
            callback,
        )

    def send_lac(self, ledger_id: int, lac: int, master_key: bytes) -> None:
        """Queue an explicit LAC update, ordered after earlier adds."""
        # Best effort: tailers also learn the LAC from the next add.
        with contextlib.suppress(WalogError):
            self._open_stream().lac(ledger_id, lac, master_key)

    async def force(self, ledger_id: int, master_key: bytes) -> ForceReply:
        """Sync every entry of the ledger queued on this client so far."""
        return await self._open_stream().force(ledger_id, next(self._request_ids), master_key)

    async def read(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes = b"",
        previous_lac: int = -1,
        long_poll_timeout: float = 0.0,
    ) -> ReadReply:
        """Read a range of entries, digests verified (see :class:`BookieClient`)."""
        request = pb.ReadRequest(
            ledger_id=ledger_id,
            first_entry_id=first_entry_id,
            last_entry_id=last_entry_id,
            fence=fence,
            master_key=master_key,
            previous_lac=previous_lac,
            long_poll_timeout_ms=max(0, round(long_poll_timeout * 1000)),
        )
        timeout = self.config.timeouts.read + max(0.0, long_poll_timeout)
        try:
            response = await self._open_stub().Read(
                request, timeout=timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise translate_rpc_error(self.bookie_id, exc) from exc
        status = _status(response.status)
        entries: list[StoredEntry] = []
        if response.entries:
            entries, ok = verified_entries(
                self.bookie_id, ledger_id, first_entry_id, response.entries
            )
            if not ok and not entries:
                status = Status.DIGEST_MISMATCH
        return ReadReply(status, entries, response.lac, response.fenced)

    async def read_lac(self, ledger_id: int) -> ReadLacReply:
        """The bookie's LAC and last stored entry of the ledger."""
        try:
            response = await self._open_stub().ReadLac(
                pb.ReadLacRequest(ledger_id=ledger_id),
                timeout=self.config.timeouts.read,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise translate_rpc_error(self.bookie_id, exc) from exc
        status = _status(response.status)
        last_entry = None
        if response.HasField("last_entry") and response.last_entry_id >= 0:
            entries, ok = verified_entries(
                self.bookie_id, ledger_id, response.last_entry_id, [response.last_entry]
            )
            if ok:
                last_entry = entries[0]
            else:
                status = Status.DIGEST_MISMATCH
        return ReadLacReply(status, response.lac, response.last_entry_id, last_entry)

    async def fence(self, ledger_id: int, master_key: bytes) -> FenceReply:
        """Fence the ledger on this bookie (persisted before the reply)."""
        try:
            response = await self._open_stub().Fence(
                pb.FenceRequest(ledger_id=ledger_id, master_key=master_key),
                timeout=self.config.timeouts.read,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise translate_rpc_error(self.bookie_id, exc) from exc
        return FenceReply(_status(response.status), response.lac, response.last_entry_id)

    async def info(self) -> pb.InfoResponse:
        """The bookie's identity and state (operations and tests)."""
        try:
            return await self._open_stub().Info(
                pb.InfoRequest(), timeout=self.config.timeouts.read, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise translate_rpc_error(self.bookie_id, exc) from exc

    async def close(self) -> None:
        """Fail pending requests and close the channel."""
        self.closed = True
        if self._stream is not None:
            self._stream.fail("the client is closed")
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None
            self._stub = None


class GrpcBookiePool(BookiePool):
    """gRPC connections to bookies by id, shared by every ledger of a client.

    Args:
        config: client settings (timeouts, frame limits).
        tls: TLS settings, or None for plaintext.
        auth_token: bearer token sent with every call, or None.
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        tls: TlsConfig | None = None,
        auth_token: str | None = None,
    ) -> None:
        self.config = config or ClientConfig()
        self._credentials = tls.channel_credentials() if tls is not None else None
        self._server_name = tls.server_name if tls is not None else None
        auth_metadata(auth_token)  # validate now, not on the first call
        self._auth_token = auth_token
        self._clients: dict[str, GrpcBookieClient] = {}
        self._closed = False

    def get(self, bookie_id: str) -> GrpcBookieClient:
        """The (lazily opened) connection to ``bookie_id``."""
        client = self._clients.get(bookie_id)
        if client is None:
            client = GrpcBookieClient(
                bookie_id,
                self.config,
                credentials=self._credentials,
                server_name=self._server_name,
                auth_token=self._auth_token,
            )
            if self._closed:
                client.closed = True  # every request fails: the pool is closed
            else:
                self._clients[bookie_id] = client
        return client

    async def close(self) -> None:
        """Close every connection; pending requests fail with BookieUnavailableError."""
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


__all__ = [
    "MAX_MESSAGE_BYTES",
    "GrpcBookieClient",
    "GrpcBookiePool",
    "QueuedAdd",
    "build_frame",
    "translate_rpc_error",
    "verified_entries",
]

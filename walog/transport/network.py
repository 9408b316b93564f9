"""Bookie connections: one batched ``Add`` stream per bookie, over the bookie's native
port when it has one (:mod:`walog.transport.native`), over grpc.aio otherwise.

The first call to a bookie asks its ``Info`` over gRPC; when the answer names a native port
(and ``ClientConfig.native_transport`` is on) every call goes over one native connection,
which costs a fraction of gRPC's CPU per message (:mod:`walog.transport.route` decides).

The add stream (:mod:`walog.transport.add_stream`) batches adds into frames and matches the
replies. Read, ReadLac and Fence are unary calls bounded by ``timeouts.read``; the entries
they return have their digests verified here, and a mismatch is reported as
:attr:`Status.DIGEST_MISMATCH` (an *unknown* answer), never as data. Everything opens
lazily, and a broken stream or connection is replaced by a new one on the next request.

``grpc.RpcError`` (which native failures are too) is translated by
:func:`walog.transport.codec.translate_rpc_error` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import ssl
from collections.abc import AsyncGenerator, Sequence
from typing import Any, NamedTuple

import grpc
import grpc.aio

from walog.config import ClientConfig
from walog.errors import BookieUnavailableError, WalogError
from walog.transport.add_stream import AddCall, AddStream
from walog.transport.base import (
    AddCallback,
    AddReply,
    BatchCallback,
    BookieClient,
    BookiePool,
    EntryListReply,
    FenceReply,
    ForceReply,
    ReadLacReply,
    ReadReply,
    StoredEntry,
)
from walog.transport.codec import BatchEncoder, status_of, translate_rpc_error, verified_entries
from walog.transport.credentials import TlsConfig, auth_metadata
from walog.transport.native import NativeCall
from walog.transport.route import NativeRoute
from walog.wire.durability import Durability
from walog.wire.frames import RPC_NAMES, Method
from walog.wire.limits import MAX_MESSAGE_BYTES
from walog.wire.packing import PackedEntries
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc
from walog.wire.status import Status

_ADD_METHOD = "/walog.bookie.v1.Bookie/Add"
_PB_DURABILITY = {Durability.PERSISTENT: pb.PERSISTENT, Durability.VOLATILE: pb.VOLATILE}


class _Outgoing(NamedTuple):
    entry_id: int
    lac: int
    data: bytes
    digest: int


def _answer_single(
    callback: AddCallback, _: Sequence[int], reply: AddReply | BaseException
) -> None:
    callback(reply)


class NetworkBookieClient(BookieClient):
    """The connection to one bookie: a lazily opened gRPC channel, native connection and
    add stream."""

    def __init__(
        self,
        bookie_id: str,
        config: ClientConfig,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        server_name: str | None = None,
        auth_token: str | None = None,
        encoder: BatchEncoder | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.bookie_id = bookie_id
        self.config = config
        self.add_timeout = config.timeouts.add
        self.encoder = encoder or BatchEncoder()
        """Numbers and encodes add batches; shared by the connections of a pool."""
        self._credentials = credentials
        self._server_name = server_name
        self._metadata = auth_metadata(auth_token)
        self._channel: grpc.aio.Channel | None = None
        self._stub: bookie_pb2_grpc.BookieAsyncStub | None = None
        self._stream: AddStream | None = None
        self._route = NativeRoute(
            bookie_id,
            config,
            self._grpc_info,
            token=auth_token.strip() if auth_token is not None else None,
            ssl_context=ssl_context,
            server_name=server_name,
        )
        self._request_ids = itertools.count(1)
        self.closed = False

    @property
    def transport(self) -> str | None:
        """What carries the calls now: ``"native"``, ``"grpc"``, or None before the first
        call (operations and tests)."""
        if self._route.current is not None:
            return "native"
        return "grpc" if self._stub is not None else None

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

    async def _grpc_info(self) -> pb.InfoResponse:
        response: pb.InfoResponse = await self._open_stub().Info(
            pb.InfoRequest(), timeout=self.config.timeouts.read, metadata=self._metadata
        )
        return response

    async def _open_add_call(self) -> AddCall:
        native = await self._route.connection()
        if native is not None:
            return native.call(Method.ADD, pb.AddResponseFrame.FromString)
        self._open_stub()
        assert self._channel is not None
        # Frames are encoded by the stream (walog/transport/codec.py): no serializer.
        add = self._channel.stream_stream(
            _ADD_METHOD,
            request_serializer=None,
            response_deserializer=pb.AddResponseFrame.FromString,
        )
        call: AddCall = add(metadata=self._metadata)  # type: ignore[call-arg]
        return call

    def _open_stream(self) -> AddStream:
        if self.closed:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: the client is closed")
        stream = self._stream
        if stream is None or stream.broken:
            stream = self._stream = AddStream(self, self._open_add_call)
        return stream

    async def _unary(self, method: Method, request: Any, response_type: Any, within: float) -> Any:
        """One request, one answer within ``within`` seconds, over the native connection or
        gRPC."""
        try:
            native = await self._route.connection()
            if native is not None:
                return await native.unary(method, request, response_type.FromString, within)
            rpc = getattr(self._open_stub(), RPC_NAMES[method])
            return await rpc(request, timeout=within, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise translate_rpc_error(self.bookie_id, exc) from exc

    def stream_broken(self, stream: AddStream) -> None:
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
        self.add_packed(
            ledger_id,
            master_key,
            PackedEntries.pack((_Outgoing(entry_id, lac, data, digest),)),
            functools.partial(_answer_single, callback),
            recovery=recovery,
            durability=durability,
        )

    def add_packed(
        self,
        ledger_id: int,
        master_key: bytes,
        packed: PackedEntries,
        callback: BatchCallback,
        *,
        recovery: bool = False,
        durability: Durability = Durability.PERSISTENT,
    ) -> None:
        """Queue packed adds of one ledger as they are (see :class:`BookieClient`);
        ``callback`` gets many ids per reply."""
        try:
            stream = self._open_stream()
        except WalogError as exc:
            # Never call back from inside the caller: it may still be setting up.
            asyncio.get_running_loop().call_soon(callback, packed.entry_ids, exc)
            return
        stream.add_packed(
            ledger_id, master_key, recovery, _PB_DURABILITY[durability], packed, callback
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
        response = await self._unary(Method.READ, request, pb.ReadResponse, timeout)
        return self._read_reply(ledger_id, first_entry_id, response)

    async def watch_lac(
        self,
        ledger_id: int,
        previous_lac: int,
        *,
        max_entries: int,
        heartbeat: float,
        min_interval: float = 0.0,
    ) -> AsyncGenerator[ReadReply, None]:
        """A server stream of LAC answers (see :class:`BookieClient`); a stream silent
        for ``heartbeat + timeouts.read`` seconds counts as a lost bookie."""
        request = pb.WatchLacRequest(
            ledger_id=ledger_id,
            previous_lac=previous_lac,
            max_entries=max_entries,
            heartbeat_ms=max(1, round(heartbeat * 1000)),
            min_interval_ms=round(min_interval * 1000),
        )
        native = await self._route.connection()
        call: NativeCall | grpc.aio.UnaryStreamCall[pb.WatchLacRequest, pb.ReadResponse]
        if native is not None:
            call = native.call(Method.WATCH_LAC, pb.ReadResponse.FromString)
            call.send(request.SerializeToString(), last=True)
        else:
            call = self._open_stub().WatchLac(request, metadata=self._metadata)
        silence = heartbeat + self.config.timeouts.read
        after = previous_lac  # the bookie's view of what it sent: entries start past it
        loop = asyncio.get_running_loop()
        silent = False

        def give_up() -> None:
            nonlocal silent
            silent = True
            call.cancel()
            if isinstance(call, NativeCall):
                call.drop_connection()

        # A watchdog, not wait_for: wait_for can swallow the consumer's cancellation when
        # a message arrives at the same moment (Python < 3.12).
        watchdog = loop.call_later(silence, give_up)
        try:
            while True:
                try:
                    response = await call.read()
                except (grpc.RpcError, asyncio.CancelledError) as exc:
                    if not silent:
                        if isinstance(exc, asyncio.CancelledError):
                            raise
                        raise translate_rpc_error(self.bookie_id, exc) from exc
                    raise BookieUnavailableError(
                        f"bookie {self.bookie_id}: LAC watch silent for {silence:.1f} s"
                    ) from None
                if not isinstance(response, pb.ReadResponse):  # grpc.aio.EOF
                    raise BookieUnavailableError(f"bookie {self.bookie_id} ended the LAC watch")
                watchdog.cancel()
                watchdog = loop.call_later(silence, give_up)
                yield self._read_reply(ledger_id, after + 1, response)
                after = max(after, response.lac)
        finally:
            watchdog.cancel()
            call.cancel()

    def _read_reply(self, ledger_id: int, first: int, response: pb.ReadResponse) -> ReadReply:
        """A read answer whose entries must start at ``first``, digests verified: a bad
        entry and everything after it are dropped (DIGEST_MISMATCH when none is left)."""
        status = status_of(response.status)
        entries: list[StoredEntry] = []
        if response.entries:
            entries, ok = verified_entries(self.bookie_id, ledger_id, first, response.entries)
            if not ok and not entries:
                status = Status.DIGEST_MISMATCH
        return ReadReply(status, entries, response.lac, response.fenced)

    async def read_lac(self, ledger_id: int) -> ReadLacReply:
        """The bookie's LAC and last stored entry of the ledger."""
        response = await self._unary(
            Method.READ_LAC,
            pb.ReadLacRequest(ledger_id=ledger_id),
            pb.ReadLacResponse,
            self.config.timeouts.read,
        )
        status = status_of(response.status)
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
        response = await self._unary(
            Method.FENCE,
            pb.FenceRequest(ledger_id=ledger_id, master_key=master_key),
            pb.FenceResponse,
            self.config.timeouts.read,
        )
        return FenceReply(status_of(response.status), response.lac, response.last_entry_id)

    async def list_entries(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int
    ) -> EntryListReply:
        """Which entries of the range the bookie holds (see :class:`BookieClient`): one
        ``ListEntries`` call, more when an answer covers only part of the range.

        Raises:
            BookieCallUnsupportedError: the bookie runs a version without the call.
            BookieUnavailableError: no answer in time.
        """
        ranges: list[tuple[int, int]] = []
        first = first_entry_id
        while True:
            request = pb.ListEntriesRequest(
                ledger_id=ledger_id, first_entry_id=first, last_entry_id=last_entry_id
            )
            response = await self._unary(
                Method.LIST_ENTRIES, request, pb.ListEntriesResponse, self.config.timeouts.read
            )
            status = status_of(response.status)
            if status is not Status.OK:
                return EntryListReply(status)
            bounds = list(response.ranges)
            if len(bounds) % 2:
                raise BookieUnavailableError(
                    f"bookie {self.bookie_id}: an entry list of {len(bounds)} bounds (not pairs)"
                )
            ranges += zip(bounds[0::2], bounds[1::2], strict=True)
            # An answer that covers nothing new would repeat itself forever.
            if response.covered_to >= last_entry_id or response.covered_to < first:
                return EntryListReply(Status.OK, tuple(ranges))
            first = response.covered_to + 1

    async def info(self) -> pb.InfoResponse:
        """The bookie's identity and state (operations and tests)."""
        response: pb.InfoResponse = await self._unary(
            Method.INFO, pb.InfoRequest(), pb.InfoResponse, self.config.timeouts.read
        )
        return response

    async def close(self) -> None:
        """Fail pending requests and close the channel."""
        self.closed = True
        if self._stream is not None:
            self._stream.fail("the client is closed")
        self._route.close()
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None
            self._stub = None


class NetworkBookiePool(BookiePool):
    """Connections to bookies by id (native or gRPC), shared by every ledger of a client.

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
        self._ssl = tls.ssl_context() if tls is not None else None
        auth_metadata(auth_token)  # validate now, not on the first call
        self._auth_token = auth_token
        self._clients: dict[str, NetworkBookieClient] = {}
        self._encoder = BatchEncoder()
        self._closed = False

    def get(self, bookie_id: str) -> NetworkBookieClient:
        """The (lazily opened) connection to ``bookie_id``."""
        client = self._clients.get(bookie_id)
        if client is None:
            client = NetworkBookieClient(
                bookie_id,
                self.config,
                credentials=self._credentials,
                server_name=self._server_name,
                auth_token=self._auth_token,
                encoder=self._encoder,
                ssl_context=self._ssl,
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


__all__ = ["NetworkBookieClient", "NetworkBookiePool"]

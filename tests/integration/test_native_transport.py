"""The bookies' native port against real bookie processes: announced through Info, used by
clients when it is there, gRPC when it is not (or is off, or cannot be reached), and a
connection that breaks the frame protocol is dropped without harm to the others."""

from __future__ import annotations

import asyncio
import itertools
import socket
from pathlib import Path

import grpc
import pytest
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_fixed

import walog.aio
from bookie.config import BookieConfig
from bookie.server.grpc_port import BookieServer
from bookie.storage.engine import BookieCore
from tests.integration.bookies import make_add
from walog.config import ClientConfig, Timeouts
from walog.errors import BookieUnavailableError
from walog.testing import LocalCluster, free_port
from walog.transport.native import NativeCallError, NativeConnection
from walog.transport.network import NetworkBookieClient
from walog.transport.route import NativeRoute
from walog.wire.frames import HEADER, HELLO_MAGIC, Kind, Method, encode
from walog.wire.proto import bookie_pb2 as pb

CONFIG = ClientConfig(timeouts=Timeouts(add=5.0, read=5.0))


async def _write_and_read(client: walog.aio.AsyncClient, bookies: int) -> set[str | None]:
    """Append to and read back a ledger over every bookie; the transports that carried it."""
    writer = await client.create_ledger(bookies, bookies, bookies)
    for index in range(10):
        await writer.append(b"entry %d" % index)
    await writer.close()
    reader = await client.open_ledger(writer.ledger_id)
    assert [e.data for e in await reader.read(0, 9)] == [b"entry %d" % i for i in range(10)]
    connections = [client.ctx.pool.get(b) for b in await client.bookies()]
    assert all(isinstance(c, NetworkBookieClient) for c in connections)
    return {c.transport for c in connections if isinstance(c, NetworkBookieClient)}


async def test_bookies_announce_a_native_port_and_clients_use_it(cluster: LocalCluster) -> None:
    async with await walog.aio.connect(cluster.metadata_uri, config=CONFIG) as client:
        assert await _write_and_read(client, 3) == {"native"}
        for bookie in cluster.bookie_ids:
            connection = client.ctx.pool.get(bookie)
            assert isinstance(connection, NetworkBookieClient)
            port = (await connection.info()).native_port
            assert port > 0 and bookie != f"127.0.0.1:{port}"


async def test_with_native_transport_off_every_call_goes_over_grpc(cluster: LocalCluster) -> None:
    config = ClientConfig(timeouts=CONFIG.timeouts, native_transport=False)
    async with await walog.aio.connect(cluster.metadata_uri, config=config) as client:
        assert await _write_and_read(client, 3) == {"grpc"}


async def test_a_bookie_without_native_port_is_reached_over_grpc() -> None:
    with LocalCluster(bookies=1, bookie_args=["--native-port", "-1"]) as local:
        async with await walog.aio.connect(local.metadata_uri, config=CONFIG) as client:
            assert await _write_and_read(client, 1) == {"grpc"}
            (bookie,) = local.bookie_ids
            connection = client.ctx.pool.get(bookie)
            assert isinstance(connection, NetworkBookieClient)
            assert (await connection.info()).native_port == 0


async def test_an_unreachable_native_port_leaves_the_calls_to_grpc(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = {"port": 0, "socket": 0}

    async def unreachable(*args: object, **kwargs: object) -> None:
        attempts["socket" if kwargs.get("unix_path") else "port"] += 1
        raise NativeCallError(grpc.StatusCode.UNAVAILABLE, "filtered")

    monkeypatch.setattr(NativeConnection, "open", unreachable)
    async with await walog.aio.connect(cluster.metadata_uri, config=CONFIG) as client:
        assert await _write_and_read(client, 3) == {"grpc"}
    # Once per bookie each (its Unix socket, then its port), then gRPC for NATIVE_RETRY_S.
    assert attempts == {"port": 3, "socket": 3}


async def test_a_restarted_bookie_is_found_again_on_its_native_port(
    fresh_cluster: LocalCluster,
) -> None:
    async with await walog.aio.connect(fresh_cluster.metadata_uri, config=CONFIG) as client:
        assert await _write_and_read(client, 3) == {"native"}
        bookie = fresh_cluster.bookie_ids[0]
        connection = client.ctx.pool.get(bookie)
        assert isinstance(connection, NetworkBookieClient)
        fresh_cluster.kill(bookie)
        with pytest.raises(BookieUnavailableError, match=bookie):
            await connection.read_lac(1)
        fresh_cluster.restart(bookie)
        async for attempt in AsyncRetrying(
            stop=stop_after_delay(20),
            wait=wait_fixed(0.1),
            retry=retry_if_exception_type(BookieUnavailableError),
            reraise=True,
        ):
            with attempt:
                await connection.read_lac(1)
        assert connection.transport == "native"


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # not a frame at all
        HEADER.pack(3, 1, Kind.DATA, 1) + b"abc",  # a call before HELLO
        HEADER.pack(2**31, 0, Kind.HELLO, 0),  # a frame over the size limit
    ],
    ids=["http", "no-hello", "huge"],
)
async def test_a_connection_that_breaks_the_frame_protocol_is_dropped_and_others_go_on(
    cluster: LocalCluster, garbage: bytes
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri, config=CONFIG) as client:
        bookie = cluster.bookie_ids[0]
        connection = client.ctx.pool.get(bookie)
        assert isinstance(connection, NetworkBookieClient)
        port = (await connection.info()).native_port

        def talk() -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(garbage)
                try:
                    return raw.recv(100)
                except ConnectionResetError:
                    return b""

        assert await asyncio.to_thread(talk) == b""  # closed without an answer
        assert await _write_and_read(client, 3) == {"native"}


async def test_a_client_that_does_not_read_its_answers_stops_being_read(
    fresh_cluster: LocalCluster,
) -> None:
    bookie = fresh_cluster.bookie_ids[0]
    async with await walog.aio.connect(fresh_cluster.metadata_uri, config=CONFIG) as client:
        writer = await client.create_ledger(3, 3, 3)
        for _ in range(4):
            await writer.append(bytes(1024 * 1024))
        await writer.close()
        connection = client.ctx.pool.get(bookie)
        assert isinstance(connection, NetworkBookieClient)
        port = (await connection.info()).native_port
        read = pb.ReadRequest(ledger_id=writer.ledger_id, first_entry_id=0, last_entry_id=3)
        body = read.SerializeToString()

        def flood() -> int:
            """Ask for 4 MiB answers without ever reading one, until the bookie stops
            reading; returns the bytes sent."""
            sent = 0
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(encode(0, Kind.HELLO, 0, HELLO_MAGIC))
                raw.settimeout(3.0)
                try:
                    for call_id in itertools.count(1):
                        chunk = encode(call_id, Kind.DATA, Method.READ, body)
                        raw.sendall(chunk + encode(call_id, Kind.END, Method.READ))
                        sent += len(chunk)
                        assert sent < 256 * 1024 * 1024, "the bookie reads on and on"
                except TimeoutError:
                    pass
            return sent

        assert await asyncio.to_thread(flood) > 0
        # The bookie serves the others meanwhile and after.
        assert await _write_and_read(client, 3) == {"native"}


async def test_a_call_left_unanswered_closes_its_connection_and_the_next_call_reconnects(
    fresh_cluster: LocalCluster,
) -> None:
    config = ClientConfig(timeouts=Timeouts(add=5.0, read=1.0))
    async with await walog.aio.connect(fresh_cluster.metadata_uri, config=config) as client:
        bookie = fresh_cluster.bookie_ids[1]
        connection = client.ctx.pool.get(bookie)
        assert isinstance(connection, NetworkBookieClient)
        await connection.read_lac(1)
        first = connection._route.current
        assert first is not None
        fresh_cluster.pause(bookie)
        try:
            with pytest.raises(BookieUnavailableError, match="DEADLINE_EXCEEDED"):
                await connection.read_lac(1)
        finally:
            fresh_cluster.resume(bookie)
        assert first.broken  # a peer this silent may be gone: never waited on again
        await connection.read_lac(1)
        assert connection._route.current not in (None, first)


def _routes(client: walog.aio.AsyncClient, bookies: list[str]) -> dict[str, str | None]:
    """The Unix socket each bookie's native connection goes through (None: TCP)."""
    out = {}
    for bookie in bookies:
        connection = client.ctx.pool.get(bookie)
        assert isinstance(connection, NetworkBookieClient)
        assert connection._route.current is not None
        out[bookie] = connection._route.current.unix_path
    return out


async def test_clients_on_the_bookies_host_use_their_unix_sockets(cluster: LocalCluster) -> None:
    async with await walog.aio.connect(cluster.metadata_uri, config=CONFIG) as client:
        assert await _write_and_read(client, 3) == {"native"}
        routes = _routes(client, cluster.bookie_ids)
        for index, bookie in enumerate(cluster.bookie_ids):
            assert routes[bookie] == str(cluster.bookie_dir(index) / "native.sock")


async def test_a_bookie_without_unix_socket_is_reached_on_its_native_port(
    fresh_cluster: LocalCluster,
) -> None:
    plain = fresh_cluster.bookie_ids[0]
    fresh_cluster.restart(plain, extra_args=["--native-socket", "off"])
    async with await walog.aio.connect(fresh_cluster.metadata_uri, config=CONFIG) as client:
        assert await _write_and_read(client, 3) == {"native"}
        routes = _routes(client, fresh_cluster.bookie_ids)
        assert routes.pop(plain) is None
        assert None not in routes.values()


async def test_a_unix_socket_that_leads_to_another_bookie_is_not_used(
    cluster: LocalCluster,
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri, config=CONFIG) as client:
        first, second = (client.ctx.pool.get(b) for b in cluster.bookie_ids[:2])
        assert isinstance(first, NetworkBookieClient) and isinstance(second, NetworkBookieClient)
        elsewhere = (await second.info()).native_socket
        assert elsewhere

        async def misleading() -> pb.InfoResponse:
            info = await first.info()
            info.native_socket = elsewhere  # the second bookie's socket, announced as ours
            return info

        route = NativeRoute(cluster.bookie_ids[0], CONFIG, misleading)
        try:
            connection = await route.connection()
            assert connection is not None and connection.unix_path is None  # the port
            info = await connection.unary(
                Method.INFO, pb.InfoRequest(), pb.InfoResponse.FromString, 5
            )
            assert info.bookie_id == cluster.bookie_ids[0]
        finally:
            route.close()


async def _bookie_in_process(tmp_path: Path, *args: str) -> tuple[BookieServer, BookieCore]:
    """A bookie run inside the test (its core and both ports), for states a process
    cannot be held in."""
    config = BookieConfig(
        data_dir=tmp_path / "bookie",
        listen=f"127.0.0.1:{free_port()}",
        metadata=f"sqlite:///{tmp_path}/meta.db",
        **dict(zip(args[::2], args[1::2], strict=True)),  # type: ignore[arg-type]
    )
    core = await BookieCore.open(config.storage_config())
    server = BookieServer(config, core, "instance")
    await server.start()
    return server, core


async def test_a_bookie_replaces_a_stale_unix_socket_and_removes_its_own_at_the_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bookie" / "native.sock"
    path.parent.mkdir()
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))  # bound, never listening: what a killed process leaves
    server, core = await _bookie_in_process(tmp_path)
    try:
        assert server.service.native_socket == str(path)
        connection = await NativeConnection.open("bookie", "", 0, unix_path=str(path))
        connection.close()
    finally:
        await server.stop_now()
        await core.close()
    assert not path.exists()


async def test_a_unix_socket_path_in_use_or_too_long_is_left_alone(tmp_path: Path) -> None:
    taken = tmp_path / "taken.sock"
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(taken))
        other.listen()
        long = tmp_path / ("x" * 120) / "native.sock"
        for path in (taken, long):
            server, core = await _bookie_in_process(tmp_path, "native_socket", str(path))
            try:
                assert server.service.native_socket == ""  # local clients use the port
                assert server.service.native_port > 0
            finally:
                await server.stop_now()
                await core.close()
        assert taken.is_socket()


async def test_a_draining_bookie_answers_new_native_calls_unavailable(tmp_path: Path) -> None:
    # In process, to hold the bookie in its draining state as long as the test needs.
    server, core = await _bookie_in_process(tmp_path)
    connection = await NativeConnection.open("bookie", "127.0.0.1", server.service.native_port)
    try:
        lac = pb.ReadLacRequest(ledger_id=1)
        answer = await connection.unary(Method.READ_LAC, lac, pb.ReadLacResponse.FromString, 5)
        assert answer.status == pb.NO_SUCH_LEDGER
        server.service.draining.set()
        with pytest.raises(NativeCallError) as refused:
            await connection.unary(Method.READ_LAC, lac, pb.ReadLacResponse.FromString, 5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in refused.value.details()
        add = connection.call(Method.ADD, pb.AddResponseFrame.FromString)
        add.send(pb.AddFrame(batches=[make_add(1, 0, b"late")]).SerializeToString())
        with pytest.raises(NativeCallError) as refused:
            await add.read()
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert core.ledgers() == []  # nothing was stored
    finally:
        connection.close()
        await server.stop_now()
        await core.close()

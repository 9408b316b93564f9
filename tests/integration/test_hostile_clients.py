"""A client that hoards a bookie's resources does not stop a well-behaved writer: the native
port serves a bounded number of connections (``--max-connections``) and a bounded number of
add streams per connection, refusing the rest at once, and the bookie's memory stays
bounded while a hostile client holds everything it can. A fence or recovery without the
ledger's password is refused before it changes anything."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import walog
import walog.aio
from walog.testing import LocalCluster
from walog.transport.network import NetworkBookieClient
from walog.wire.digest import master_key
from walog.wire.frames import (
    HELLO_MAGIC,
    Code,
    FrameDecoder,
    Kind,
    Method,
    decode_status,
    encode,
)
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.status import Status

MAX_CONNECTIONS = 40


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[tuple[LocalCluster, int]]:
    args = ["--max-connections", str(MAX_CONNECTIONS)]
    with LocalCluster(bookies=1, data_dir=tmp_path / "c", bookie_args=args) as cluster:
        yield cluster, asyncio.run(_native_port(cluster))


async def _native_port(cluster: LocalCluster) -> int:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        connection = client.ctx.pool.get(cluster.bookie_ids[0])
        assert isinstance(connection, NetworkBookieClient)
        return (await connection.info()).native_port


def _greeted(port: int) -> socket.socket | None:
    """A native connection past its HELLO, or None when the bookie closed it."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    decoder = FrameDecoder()
    frames: list[tuple[int, Kind, int, bytes]] = []
    try:
        raw.sendall(encode(0, Kind.HELLO, 0, HELLO_MAGIC))
        while not frames:
            data = raw.recv(65536)
            if not data:
                break
            frames = decoder.feed(data)
    except (ConnectionResetError, BrokenPipeError):
        pass
    if frames and decode_status(frames[0][3])[0] == Code.OK:
        return raw
    raw.close()
    return None


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _append_and_read(cluster: LocalCluster, count: int) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        writer = client.create_ledger(1, 1, 1)
        for i in range(count):
            assert writer.append(b"well-behaved %d" % i) == i
        writer.close()
        reader = client.open_ledger(writer.ledger_id)
        assert len(reader.read(0, count - 1)) == count


def test_connections_beyond_the_cap_are_closed_and_a_writer_still_works(
    bookie: tuple[LocalCluster, int],
) -> None:
    cluster, port = bookie
    held = []
    try:
        refused = 0
        for _ in range(MAX_CONNECTIONS + 20):
            connection = _greeted(port)
            if connection is None:
                refused += 1
            else:
                held.append(connection)
        assert len(held) <= MAX_CONNECTIONS
        assert refused >= 20
        # Every native slot is taken: the writer's client gets the gRPC port instead.
        _append_and_read(cluster, 200)
    finally:
        for connection in held:
            connection.close()
    _append_and_read(cluster, 10)  # and the native port again once they are gone


def test_add_streams_beyond_the_per_connection_bound_are_refused(
    bookie: tuple[LocalCluster, int],
) -> None:
    cluster, port = bookie
    pid = cluster.bookie(0).proc.pid  # type: ignore[union-attr]
    before = _rss_bytes(pid)
    connection = _greeted(port)
    assert connection is not None
    with connection:
        # 10,000 add streams that the client opens and never finishes.
        opening = pb.AddFrame().SerializeToString()  # an add stream with nothing in it yet
        batch = b"".join(
            encode(call_id, Kind.DATA, Method.ADD, opening) for call_id in range(1, 10_001)
        )
        connection.sendall(batch)
        decoder = FrameDecoder()
        refusals = 0
        connection.settimeout(30)
        while refusals < 10_000 - 64:
            data = connection.recv(1 << 20)
            assert data, "the bookie dropped the connection"
            for _, kind, _, body in decoder.feed(data):
                if kind == Kind.END and decode_status(body)[0] == Code.RESOURCE_EXHAUSTED:
                    refusals += 1
        _append_and_read(cluster, 100)
        assert _rss_bytes(pid) - before < 64 * 1024 * 1024


async def test_a_fence_or_recovery_without_the_password_changes_nothing(
    bookie: tuple[LocalCluster, int],
) -> None:
    cluster, _ = bookie
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        writer = await client.create_ledger(1, 1, 1, password=b"right")
        await writer.append(b"first")
        connection = client.ctx.pool.get(cluster.bookie_ids[0])
        assert isinstance(connection, NetworkBookieClient)
        reply = await connection.fence(writer.ledger_id, master_key(b"wrong"))
        assert reply.status is Status.UNAUTHORIZED
        with pytest.raises(walog.UnauthorizedError):
            await client.open_ledger(writer.ledger_id, recovery=True, password=b"wrong")
        # Nothing was fenced: the writer goes on, and closes its ledger itself.
        assert await writer.append(b"second") == 1
        await writer.close()
        assert writer.metadata.last_entry_id == 1

"""A client that hoards a bookie's resources does not stop a well-behaved writer: the native
port serves a bounded number of connections (``--max-connections``) and a bounded number of
add streams per connection, refusing the rest at once; a client that asks for answers and
never reads them stops being read; the bookie's memory stays bounded and a well-behaved
writer's append p99 within 5x of a quiet twin bookie's, measured in the same window, while
hostile clients hold everything they can. A fence or recovery without the ledger's password
is refused before it changes anything."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import statistics
import time
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
BOOKIE_ARGS = ["--max-connections", str(MAX_CONNECTIONS)]


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[tuple[LocalCluster, int]]:
    with LocalCluster(bookies=1, data_dir=tmp_path / "c", bookie_args=BOOKIE_ARGS) as cluster:
        yield cluster, asyncio.run(_native_port(cluster))


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[LocalCluster]:
    """A bookie configured as ``bookie``'s, that no hostile client touches."""
    with LocalCluster(bookies=1, data_dir=tmp_path / "twin", bookie_args=BOOKIE_ARGS) as cluster:
        yield cluster


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


def _alternated_latencies_ms(clusters: list[LocalCluster], count: int) -> list[list[float]]:
    """One append at a time on a fresh ledger of each cluster, taking turns (in an order
    that alternates too), so that every cluster's appends meet the same load of this
    machine: each cluster's latencies in milliseconds."""
    with contextlib.ExitStack() as stack:
        writers = []
        for cluster in clusters:
            client = stack.enter_context(walog.connect(cluster.metadata_uri))
            writers.append(client.create_ledger(1, 1, 1))
        for _ in range(20):  # connections and ledgers warm
            for writer in writers:
                writer.append(b"warm-up")
        latencies: list[list[float]] = [[] for _ in writers]
        turns = list(zip(writers, latencies, strict=True))
        for i in range(count):
            for writer, taken in turns if i % 2 else reversed(turns):
                begun = time.perf_counter()
                writer.append(b"well-behaved %d" % i)
                taken.append((time.perf_counter() - begun) * 1000)
        for writer in writers:
            writer.close()
    return latencies


def _p99(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100)[98]


def _big_ledger(cluster: LocalCluster, entries: int, size: int) -> int:
    with walog.connect(cluster.metadata_uri) as client:
        writer = client.create_ledger(1, 1, 1)
        for i in range(entries):
            writer.append(bytes([i % 256]) * size)
        writer.close()
        return writer.ledger_id


def _hoard_streams(port: int) -> socket.socket:
    """A connection that opens 10,000 add streams and never reads a refusal."""
    connection = _greeted(port)
    assert connection is not None
    opening = pb.AddFrame().SerializeToString()
    connection.sendall(
        b"".join(encode(call_id, Kind.DATA, Method.ADD, opening) for call_id in range(1, 10_001))
    )
    return connection


def _ask_and_never_read(
    port: int, ledger_id: int, answers_bytes: int, entry_bytes: int
) -> tuple[socket.socket, int]:
    """A connection that asks for ``answers_bytes`` of entries (whole-ledger reads of 16
    entries) and reads nothing back; returns it (open) and how many requests went out
    before its socket stopped taking them."""
    connection = _greeted(port)
    assert connection is not None
    per_request = 16 * entry_bytes
    connection.settimeout(2.0)
    sent = 0
    for call_id in range(1, answers_bytes // per_request + 1):
        request = pb.ReadRequest(ledger_id=ledger_id, first_entry_id=0, last_entry_id=15)
        try:
            connection.sendall(encode(call_id, Kind.DATA, Method.READ, request.SerializeToString()))
        except TimeoutError:
            break
        sent += 1
    return connection, sent


def test_a_writer_keeps_its_latency_while_clients_hoard_streams_and_never_read_answers(
    bookie: tuple[LocalCluster, int], twin: LocalCluster
) -> None:
    cluster, port = bookie
    pid = cluster.bookie(0).proc.pid  # type: ignore[union-attr]
    entry_bytes = 64 * 1024
    ledger_id = _big_ledger(cluster, 16, entry_bytes)  # 1 MiB per whole-ledger read
    before = _rss_bytes(pid)
    hoarder = _hoard_streams(port)
    reader, asked = _ask_and_never_read(port, ledger_id, 1 << 30, entry_bytes)
    with hoarder, reader:
        assert asked * 16 * entry_bytes == 1 << 30, "1 GiB of answers asked for"
        time.sleep(1.0)  # the bookie answers what fits in the socket, then stops reading
        # The quiet figure is the twin's, taken append for append with the attacked one:
        # the load of the rest of this machine (other tests, other processes) weighs on
        # both alike, and only the attack tells them apart.
        attacked_ms, quiet_ms = _alternated_latencies_ms([cluster, twin], 300)
        attacked, quiet = _p99(attacked_ms), _p99(quiet_ms)
        grown = _rss_bytes(pid) - before
    print(
        f"append p99: quiet {quiet:.2f} ms, attacked {attacked:.2f} ms;"
        f" bookie RSS +{grown >> 20} MiB"
    )
    assert attacked <= 5 * quiet, f"append p99 {attacked:.2f} ms under attack, {quiet:.2f} quiet"
    assert grown < 128 * 1024 * 1024, f"the bookie grew {grown >> 20} MiB"


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

"""Fuzzing a real bookie's native port: whatever arrives after a valid HELLO (frames of any
kind, method, call id and body, or bytes that are no frames at all), the bookie answers or
drops that connection, never crashes, and keeps serving the others.

``--slow`` runs the same property with many more examples.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import walog.aio
from walog.testing import LocalCluster
from walog.transport.network import NetworkBookieClient
from walog.wire.frames import HELLO_MAGIC, Code, FrameDecoder, Kind, decode_status, encode
from walog.wire.proto import bookie_pb2 as pb

FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
MANY = settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))

_frame = st.builds(
    encode,
    st.integers(0, 2**32 - 1),
    st.sampled_from(list(Kind)),
    st.integers(0, 255),
    st.one_of(
        st.binary(max_size=200),
        st.builds(lambda m: m.SerializeToString(), st.just(pb.InfoRequest())),
        st.builds(
            lambda first, last: pb.ReadRequest(
                ledger_id=1, first_entry_id=first, last_entry_id=last
            ).SerializeToString(),
            st.integers(-5, 5),
            st.integers(-5, 5),
        ),
    ),
)
_traffic = st.lists(st.one_of(_frame, st.binary(min_size=1, max_size=40)), max_size=6)


@pytest.fixture(scope="module")
def native_port() -> Iterator[int]:
    with LocalCluster(bookies=1) as cluster:
        yield asyncio.run(_native_port(cluster))


async def _native_port(cluster: LocalCluster) -> int:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        connection = client.ctx.pool.get(cluster.bookie_ids[0])
        assert isinstance(connection, NetworkBookieClient)
        return (await connection.info()).native_port


def _exchange(port: int, traffic: list[bytes]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(encode(0, Kind.HELLO, 0, HELLO_MAGIC))
        try:
            for piece in traffic:
                raw.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # dropped: fine


def _still_serving(port: int) -> None:
    """A new connection gets its HELLO answered and an Info call served."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(
            encode(0, Kind.HELLO, 0, HELLO_MAGIC)
            + encode(1, Kind.DATA, 6, pb.InfoRequest().SerializeToString())
            + encode(1, Kind.END, 6)
        )
        decoder = FrameDecoder()
        frames: list[tuple[int, Kind, int, bytes]] = []
        while len(frames) < 3:
            data = raw.recv(65536)
            assert data, "the bookie closed a well-behaved connection"
            frames += decoder.feed(data)
    hello, answer, end = frames[:3]
    assert hello[1] == Kind.HELLO and decode_status(hello[3])[0] == Code.OK
    assert answer[1] == Kind.DATA and pb.InfoResponse.FromString(answer[3]).native_port == port
    assert end[1] == Kind.END and decode_status(end[3])[0] == Code.OK


@FAST
@given(traffic=_traffic)
def test_any_traffic_after_hello_never_stops_the_bookie(
    native_port: int, traffic: list[bytes]
) -> None:
    _exchange(native_port, traffic)
    _still_serving(native_port)


@pytest.mark.slow
@MANY
@given(traffic=_traffic)
def test_much_traffic_after_hello_never_stops_the_bookie(
    native_port: int, traffic: list[bytes]
) -> None:
    _exchange(native_port, traffic)
    _still_serving(native_port)

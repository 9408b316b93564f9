"""The client's add stream over a native call, against a transport that fills up: frames
leave in the order their adds were queued, whichever path sends them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from walog.config import ClientConfig
from walog.transport.add_stream import AddCall, AddStream
from walog.transport.codec import BatchEncoder
from walog.transport.native import NativeConnection
from walog.wire.frames import FrameDecoder, Kind, Method
from walog.wire.packing import PackedEntries, unpack_entries
from walog.wire.proto import bookie_pb2 as pb


class _Entry:
    def __init__(self, entry_id: int) -> None:
        self.entry_id, self.lac, self.data, self.digest = entry_id, entry_id - 1, b"x", 0


class _Transport(asyncio.Transport):
    """Keeps what is written; full or not as the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return False


@dataclasses.dataclass
class _Owner:
    bookie_id: str = "bookie"
    config: ClientConfig = dataclasses.field(default_factory=ClientConfig)
    add_timeout: float = 10.0
    encoder: BatchEncoder = dataclasses.field(default_factory=BatchEncoder)

    def stream_broken(self, stream: AddStream) -> None:
        pass


def _ignore(entry_ids: Sequence[int], reply: object) -> None:
    pass


def _sent_entry_ids(written: bytes) -> list[int]:
    ids = []
    for _, kind, _, body in FrameDecoder().feed(written):
        assert kind == Kind.DATA
        for batch in pb.AddFrame.FromString(body).batches:
            ids += [entry[0] for entry in unpack_entries(batch.entries)[0]]
    return ids


async def test_frames_leave_in_queue_order_while_the_socket_fills_and_drains() -> None:
    transport = _Transport()
    connection = NativeConnection("bookie")
    connection.connection_made(transport)
    call = connection.call(Method.ADD, pb.AddResponseFrame.FromString)

    async def open_call() -> AddCall:
        return call

    stream = AddStream(_Owner(), open_call)

    def add(entry_id: int) -> None:
        packed = PackedEntries.pack([_Entry(entry_id)])
        stream.add_packed(1, b"k" * 32, False, pb.PERSISTENT, packed, _ignore)

    add(0)
    for _ in range(3):
        await asyncio.sleep(0)  # the call opens, the first frame goes
    connection.pause_writing()  # the socket is full
    add(1)
    add(2)
    for _ in range(3):
        await asyncio.sleep(0)  # a flush finds the socket full: the sender task takes over
    add(3)  # its flush is scheduled before the sender task learns that the socket drained
    connection.resume_writing()
    for _ in range(5):
        await asyncio.sleep(0)
    assert _sent_entry_ids(bytes(transport.written)) == [0, 1, 2, 3]
    stream.fail("done")

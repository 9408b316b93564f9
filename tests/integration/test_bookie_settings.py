"""A bookie's settings as a real process takes them: from flags, with the limits both ends
of the wire agree on (walog/wire/limits.py)."""

from __future__ import annotations

from pathlib import Path

import grpc.aio

from tests.integration.bookies import BookieProcess, make_add, send_frames
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc


async def test_a_bookie_started_from_flags_takes_a_little_more_than_a_clients_entries(
    tmp_path: Path,
) -> None:
    # The bookie's default allows a little more than a client's (walog/wire/limits.py), so
    # that a client's largest entry always fits, whether the bookie was started from flags,
    # from a file or in-process.
    bookie = BookieProcess(tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db")
    try:
        bookie.start().wait_ready()
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            data = b"x" * (DEFAULT_MAX_ENTRY_BYTES + 1)
            results, _ = await send_frames(stub, [pb.AddFrame(batches=[make_add(7, 0, data)])])
            assert [r.status for r in results] == [pb.OK]
    finally:
        bookie.stop_quietly()

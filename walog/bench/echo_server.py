"""The far end of the gRPC floor: a grpc.aio server that answers every message with its size.

Run as ``python -m walog.bench.echo_server PORT_FILE [SYNC_FILE]``; it writes its port to
PORT_FILE once it serves and runs until terminated. With SYNC_FILE it appends every message
to that file and fdatasyncs it before answering, on the event loop: the least a bookie can do
for one PERSISTENT add at a time.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc

METHOD = "/walog.bench.Echo/Stream"
"""The one bidirectional-stream method, with raw bytes in and out (no protobuf)."""
_ACK = struct.Struct("<I")


async def serve(port_file: Path, sync_file: Path | None = None) -> None:
    """Serve the echo method on a free loopback port; write the port to ``port_file``.
    With ``sync_file``, every message is appended to it and synced before its answer."""
    fd = -1 if sync_file is None else os.open(sync_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    async def stream(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
        async for frame in requests:
            if fd >= 0:
                os.write(fd, frame)
                os.fdatasync(fd)
            yield _ACK.pack(len(frame))

    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "walog.bench.Echo", {"Stream": grpc.stream_stream_rpc_method_handler(stream)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    # Written once, before serving: a tiny write, not worth a thread.
    port_file.write_text(str(port))  # noqa: ASYNC240
    await server.wait_for_termination()


def main(argv: Sequence[str] | None = None) -> int:
    """``PORT_FILE [SYNC_FILE]``: serve until terminated, writing the port to PORT_FILE."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (1, 2):
        print("usage: python -m walog.bench.echo_server PORT_FILE [SYNC_FILE]", file=sys.stderr)
        return 2
    asyncio.run(serve(Path(args[0]), Path(args[1]) if len(args) == 2 else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

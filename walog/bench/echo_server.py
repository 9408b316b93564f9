"""The far end of the gRPC floor: a grpc.aio server that answers every message with its size.

Run as ``python -m walog.bench.echo_server PORT_FILE``; it writes its port to PORT_FILE once
it serves and runs until terminated.
"""

from __future__ import annotations

import asyncio
import struct
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc

METHOD = "/walog.bench.Echo/Stream"
"""The one bidirectional-stream method, with raw bytes in and out (no protobuf)."""
_ACK = struct.Struct("<I")


async def serve(port_file: Path) -> None:
    """Serve the echo method on a free loopback port; write the port to ``port_file``."""

    async def stream(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
        async for frame in requests:
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
    """``PORT_FILE``: serve until terminated, writing the port to PORT_FILE."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m walog.bench.echo_server PORT_FILE", file=sys.stderr)
        return 2
    asyncio.run(serve(Path(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

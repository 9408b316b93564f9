"""The far end of the transport floors: a server that answers every message with its size.

Run as ``python -m walog.bench.echo_server [--native|--unix] PORT_FILE [SYNC_FILE]``; it
writes its port to PORT_FILE once it serves and runs until terminated. It speaks grpc.aio
(one bidirectional-stream method), or with ``--native`` the frames of a bookie's native port
(walog/wire/frames.py) on an asyncio protocol, answering a HELLO and then each DATA
frame; ``--unix`` serves those frames on the Unix socket ``PORT_FILE.sock`` instead and
writes ``unix:PATH`` to PORT_FILE. With SYNC_FILE (its space reserved first, as the
journal's) it appends every message to that file and fdatasyncs it before answering, on the
event loop: the least a bookie can do for one PERSISTENT add at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import cast

import grpc

import walog._loop
from walog.wire.frames import Code, FrameDecoder, Kind, encode, encode_status

METHOD = "/walog.bench.Echo/Stream"
"""The one bidirectional-stream method, with raw bytes in and out (no protobuf)."""
_ACK = struct.Struct("<I")


RESERVED_BYTES = 64 * 1024 * 1024
"""Space reserved in a sync file up front, as a bookie's journal reserves its files: a sync
then flushes data only, not a growing file size."""


def reserve(fd: int) -> None:
    """Reserve :data:`RESERVED_BYTES` in the file ``fd`` (best effort)."""
    with contextlib.suppress(OSError):
        os.posix_fallocate(fd, 0, RESERVED_BYTES)


def _open(sync_file: Path | None) -> int:
    if sync_file is None:
        return -1
    fd = os.open(sync_file, os.O_WRONLY | os.O_CREAT)
    reserve(fd)
    return fd


class _NativeEcho(asyncio.Protocol):
    """One connection in native frames: HELLO answered OK, each DATA answered with a DATA."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's are not subclasses
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        answers = []
        for call_id, kind, _, body in self._decoder.feed(data):
            if kind == Kind.HELLO:
                answers.append(encode(0, Kind.HELLO, 0, encode_status(Code.OK)))
            elif kind == Kind.DATA:
                if self._fd >= 0:
                    os.write(self._fd, body)
                    os.fdatasync(self._fd)
                answers.append(encode(call_id, Kind.DATA, 0, _ACK.pack(len(body))))
        if answers and self._transport is not None:
            self._transport.write(b"".join(answers))


async def serve_native(port_file: Path, sync_file: Path | None = None) -> None:
    """Serve native frames on a free loopback port; write the port to ``port_file``.
    With ``sync_file``, every message is appended to it and synced before its answer."""
    fd = _open(sync_file)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _NativeEcho(fd), "127.0.0.1", 0)
    port_file.write_text(str(server.sockets[0].getsockname()[1]))  # noqa: ASYNC240
    await server.serve_forever()


async def serve_unix(port_file: Path, sync_file: Path | None = None) -> None:
    """:func:`serve_native` on the Unix socket ``PORT_FILE.sock``; writes ``unix:PATH``."""
    fd = _open(sync_file)
    path = f"{port_file}.sock"
    server = await asyncio.get_running_loop().create_unix_server(lambda: _NativeEcho(fd), path)
    port_file.write_text(f"unix:{path}")  # noqa: ASYNC240
    await server.serve_forever()


async def serve(port_file: Path, sync_file: Path | None = None) -> None:
    """Serve the echo method on a free loopback port; write the port to ``port_file``.
    With ``sync_file``, every message is appended to it and synced before its answer."""
    fd = _open(sync_file)

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
    """``[--native|--unix] PORT_FILE [SYNC_FILE]``: serve until terminated, writing the
    port to PORT_FILE."""
    args = list(sys.argv[1:] if argv is None else argv)
    servers = {"--native": serve_native, "--unix": serve_unix}
    run = servers[args.pop(0)] if args and args[0] in servers else serve
    if len(args) not in (1, 2):
        print(
            "usage: python -m walog.bench.echo_server [--native|--unix] PORT_FILE [SYNC_FILE]",
            file=sys.stderr,
        )
        return 2
    walog._loop.run(run(Path(args[0]), Path(args[1]) if len(args) == 2 else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

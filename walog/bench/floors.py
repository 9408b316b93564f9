"""Physical floors: what the disk and a bare gRPC stream can do on this machine.

* :func:`fdatasync_floor` - 4 KiB ``write`` + ``fdatasync`` one at a time, the cost a
  PERSISTENT acknowledgement pays at least once per journal group commit.
* :func:`grpc_echo_floor` - a grpc.aio bidirectional stream between two Python processes,
  carrying 1 KiB entries packed ``batch`` to a message and acknowledged per message: the
  ceiling of any Python client/server pair that batches the same way, before a bookie does
  any work; and the round trip of one 1 KiB message at a time on the same stream, the
  least that one append in flight can take before its journal sync.

The echo server runs in its own interpreter (:mod:`walog.bench.echo_server`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from walog.bench.echo_server import METHOD
from walog.bench.stats import Latency, Rate, payload

FRAMES_IN_FLIGHT = 64
"""Messages the echo client keeps unacknowledged."""


def fdatasync_floor(directory: str | os.PathLike[str], seconds: float, size: int = 4096) -> Latency:
    """Time ``size``-byte appends, each followed by ``fdatasync``, for ``seconds``."""
    block = payload(size)
    latency = Latency()
    fd, name = tempfile.mkstemp(prefix="fsync-floor-", dir=directory)
    try:
        deadline = time.perf_counter() + seconds
        while (now := time.perf_counter()) < deadline:
            os.write(fd, block)
            os.fdatasync(fd)
            latency.record(time.perf_counter() - now)
    finally:
        os.close(fd)
        os.unlink(name)
    return latency


async def _pump(target: str, batch: int, seconds: float, entry_bytes: int) -> Rate:
    frame = payload(entry_bytes) * batch
    async with grpc.aio.insecure_channel(target) as channel:
        await asyncio.wait_for(channel.channel_ready(), 10.0)
        call = channel.stream_stream(METHOD, None, None)(None)
        credit = asyncio.Semaphore(FRAMES_IN_FLIGHT)
        acked = 0
        stop = asyncio.Event()

        async def receive() -> None:
            nonlocal acked
            async for _ in call:
                acked += 1
                credit.release()

        receiver = asyncio.create_task(receive())
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        loop.call_later(seconds, stop.set)
        sent = 0
        while not stop.is_set():
            await credit.acquire()
            await call.write(frame)
            sent += 1
        await call.done_writing()
        await receiver
        elapsed = time.perf_counter() - started
    return Rate(ops=acked * batch, seconds=elapsed, payload_bytes=acked * batch * entry_bytes)


async def _round_trips(target: str, seconds: float, entry_bytes: int) -> Latency:
    message = payload(entry_bytes)
    latency = Latency()
    async with grpc.aio.insecure_channel(target) as channel:
        await asyncio.wait_for(channel.channel_ready(), 10.0)
        call = channel.stream_stream(METHOD, None, None)(None)
        for _ in range(50):  # warm the stream up
            await call.write(message)
            await call.read()
        deadline = time.perf_counter() + seconds
        while (now := time.perf_counter()) < deadline:
            await call.write(message)
            await call.read()
            latency.record(time.perf_counter() - now)
        await call.done_writing()
    return latency


def grpc_echo_floor(
    batches: Sequence[int], seconds: float, entry_bytes: int = 1024
) -> tuple[dict[int, Rate], Latency]:
    """Entries per second through a bare grpc.aio stream to another process, per batch size,
    and the round trip of one message at a time on such a stream."""
    with tempfile.TemporaryDirectory(prefix="walog-echo-") as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen(
            [sys.executable, "-m", "walog.bench.echo_server", str(port_file)],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            deadline = time.monotonic() + 30.0
            while not port_file.exists() or not port_file.read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the gRPC echo server did not start")
                time.sleep(0.05)
            target = f"127.0.0.1:{port_file.read_text()}"
            rates = {
                batch: asyncio.run(_pump(target, batch, seconds, entry_bytes)) for batch in batches
            }
            return rates, asyncio.run(_round_trips(target, seconds, entry_bytes))
        finally:
            server.terminate()
            server.wait(10)

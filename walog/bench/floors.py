"""Physical floors: what the disk and a bare gRPC stream can do on this machine.

* :func:`fdatasync_floor` - 4 KiB ``write`` + ``fdatasync`` one at a time into a file whose
  space is reserved (as the journal's is), the cost a PERSISTENT acknowledgement pays at
  least once per journal group commit.
* :func:`grpc_echo_floor` - a grpc.aio bidirectional stream between two Python processes,
  carrying 1 KiB entries packed ``batch`` to a message and acknowledged per message: the
  ceiling of any Python client/server pair that batches the same way, before a bookie does
  any work; and the round trip of one 1 KiB message at a time on the same stream, the
  least that one append in flight can take before its journal sync.
* :func:`quorum_floor` - one 1 KiB message at a time to three echo processes, timed to the
  second answer, bare and with each process syncing the message to disk before answering:
  the floor of an E3/Qw3/Qa2 append in flight on this stack; over grpc.aio, or over the
  frames of a bookie's native port with walog's own native client calls, on TCP or on Unix
  sockets (how walog reaches bookies on its own host).

The echo server runs in its own interpreter (:mod:`walog.bench.echo_server`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc

import walog._loop
from walog._loop_thread import LoopThread
from walog.bench.echo_server import METHOD, reserve
from walog.bench.stats import Latency, Rate, cpu_seconds, payload
from walog.transport.native import EOF, NativeCall, NativeConnection
from walog.wire.frames import Method

FRAMES_IN_FLIGHT = 64
"""Messages the echo client keeps unacknowledged."""
WARM_UP_ROUNDS = 50
"""Untimed round trips that open the quorum floor's streams."""
ANSWER_TIMEOUT_S = 10.0
"""An echo process that does not answer within this time fails the quorum floor."""


def fdatasync_floor(directory: str | os.PathLike[str], seconds: float, size: int = 4096) -> Latency:
    """Time ``size``-byte appends, each followed by ``fdatasync``, for ``seconds``, into a
    file with its space reserved (:func:`walog.bench.echo_server.reserve`)."""
    block = payload(size)
    latency = Latency()
    fd, name = tempfile.mkstemp(prefix="fsync-floor-", dir=directory)
    try:
        reserve(fd)
        deadline = time.perf_counter() + seconds
        while (now := time.perf_counter()) < deadline:
            os.write(fd, block)
            os.fdatasync(fd)
            latency.record(time.perf_counter() - now)
    finally:
        os.close(fd)
        os.unlink(name)
    return latency


def thread_handover_floor(count: int) -> tuple[Latency, Latency]:
    """What the sync API's two thread wake-ups cost with nothing else to do: ``count`` calls
    handed to an idle event-loop thread (:meth:`walog._loop_thread.LoopThread.call_soon`, as the
    sync writers hand appends over), each settling at once a ``concurrent.futures`` future
    the caller waits on. Returns the times from the call to the loop thread running it, and
    from the future's result to the caller running again."""
    there, back = Latency(), Latency()
    loop = LoopThread(name="bench-handover")
    try:
        for _ in range(count):
            future: concurrent.futures.Future[float] = concurrent.futures.Future()

            def answer(future: concurrent.futures.Future[float] = future) -> None:
                future.set_result(time.perf_counter())

            called = time.perf_counter()
            loop.call_soon(answer)
            answered = future.result()
            there.record(answered - called)
            back.record(time.perf_counter() - answered)
    finally:
        loop.stop()
    return there, back


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


@contextlib.contextmanager
def _echo_servers(
    count: int, sync_dir: str | os.PathLike[str] | None = None, *, transport: str = "grpc"
) -> Iterator[tuple[list[str], list[int]]]:
    """Start ``count`` echo servers (each syncing to its own file in ``sync_dir`` when
    given; speaking ``transport``: ``grpc``, ``native`` frames on TCP or on ``unix``
    sockets); yield their targets (``HOST:PORT`` or ``unix:PATH``) and process ids;
    terminate them."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    servers: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="walog-echo-") as tmp:
        try:
            port_files = []
            for index in range(count):
                port_files.append(Path(tmp) / f"port-{index}")
                argv = [sys.executable, "-m", "walog.bench.echo_server"]
                argv += [] if transport == "grpc" else [f"--{transport}"]
                argv.append(str(port_files[-1]))
                if sync_dir is not None:
                    argv.append(str(Path(sync_dir) / f"{Path(tmp).name}-{index}.sync"))
                servers.append(subprocess.Popen(argv, env=env))
            deadline = time.monotonic() + 30.0
            for server, port_file in zip(servers, port_files, strict=True):
                while not port_file.exists() or not port_file.read_text():
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the echo server did not start")
                    time.sleep(0.05)
            targets = [_target(port_file.read_text()) for port_file in port_files]
            yield targets, [server.pid for server in servers]
        finally:
            for server in servers:
                server.terminate()
            for server in servers:
                server.wait(10)
            if sync_dir is not None:
                for sync_file in Path(sync_dir).glob(f"{Path(tmp).name}-*.sync"):
                    sync_file.unlink()


def _target(announced: str) -> str:
    return announced if announced.startswith("unix:") else f"127.0.0.1:{announced}"


def grpc_echo_floor(
    batches: Sequence[int], seconds: float, entry_bytes: int = 1024
) -> tuple[dict[int, Rate], Latency]:
    """Entries per second through a bare grpc.aio stream to another process, per batch size,
    and the round trip of one message at a time on such a stream."""
    with _echo_servers(1) as ((target,), _):
        rates = {
            batch: walog._loop.run(_pump(target, batch, seconds, entry_bytes)) for batch in batches
        }
        return rates, walog._loop.run(_round_trips(target, seconds, entry_bytes))


async def _open_calls(
    targets: Sequence[str], transport: str, stack: contextlib.AsyncExitStack
) -> list[grpc.aio.StreamStreamCall[bytes, bytes] | NativeCall]:
    """One echo stream to each target, closed with ``stack``."""
    calls: list[grpc.aio.StreamStreamCall[bytes, bytes] | NativeCall] = []
    for target in targets:
        host, _, port = target.rpartition(":")
        if transport in ("native", "unix"):
            if transport == "unix":
                path = target.removeprefix("unix:")
                connection = await NativeConnection.open(target, "", 0, unix_path=path)
            else:
                connection = await NativeConnection.open(target, host, int(port))
            stack.callback(connection.close)
            calls.append(connection.call(Method.ADD, bytes))
        else:
            channel = grpc.aio.insecure_channel(target)
            stack.push_async_callback(channel.close, None)
            await asyncio.wait_for(channel.channel_ready(), 10.0)
            calls.append(channel.stream_stream(METHOD, None, None)(None))
    return calls


async def _quorum_round_trips(
    targets: Sequence[str], quorum: int, seconds: float, entry_bytes: int, transport: str
) -> Latency:
    message = payload(entry_bytes)
    latency = Latency()
    loop = asyncio.get_running_loop()
    answers = 0
    reached: asyncio.Future[None] = loop.create_future()
    everyone: asyncio.Future[None] = loop.create_future()

    async def receive(call: grpc.aio.StreamStreamCall[bytes, bytes] | NativeCall) -> None:
        nonlocal answers
        while await call.read() is not EOF:
            answers += 1
            if answers == quorum:
                reached.set_result(None)
            if answers == len(targets):
                everyone.set_result(None)

    async with contextlib.AsyncExitStack() as stack:
        calls = await _open_calls(targets, transport, stack)
        receivers = [asyncio.create_task(receive(call)) for call in calls]
        warm_up = WARM_UP_ROUNDS
        deadline = time.perf_counter() + seconds
        while warm_up > 0 or time.perf_counter() < deadline:
            started = time.perf_counter()
            answers = 0
            reached, everyone = loop.create_future(), loop.create_future()
            for call in calls:
                await call.write(message)
            await asyncio.wait_for(reached, ANSWER_TIMEOUT_S)
            if warm_up > 0:
                warm_up -= 1
                deadline = time.perf_counter() + seconds
            else:
                latency.record(time.perf_counter() - started)
            # The slower answers too, before the next message.
            await asyncio.wait_for(everyone, ANSWER_TIMEOUT_S)
        for call in calls:
            call.cancel()
        await asyncio.gather(*receivers, return_exceptions=True)
    return latency


@dataclasses.dataclass(frozen=True)
class QuorumFloor:
    """One message at a time to three echo processes, timed to the second answer."""

    bare: Latency
    """The echo processes answer at once."""
    synced: Latency
    """Each echo process appends the message to a file and fdatasyncs it first."""
    cpu_s_per_round: float
    """CPU seconds the client and the three syncing processes used per timed round of
    ``synced`` (the warm-up rounds counted as rounds too)."""


def quorum_floor(
    seconds: float,
    sync_dir: str | os.PathLike[str],
    *,
    transport: str = "grpc",
    servers: int = 3,
    quorum: int = 2,
    entry_bytes: int = 1024,
) -> QuorumFloor:
    """One message at a time sent to ``servers`` echo processes, timed to the ``quorum``-th
    answer: bare, and with every server appending and fdatasyncing the message (in
    ``sync_dir``) before it answers. The second is an E3/Qw3/Qa2 PERSISTENT append with no
    bookie logic at all: what one append in flight costs in Python here, on ``transport``
    (``grpc``, or the native port's frames on TCP, ``native``, or Unix sockets, ``unix``)."""
    with _echo_servers(servers, transport=transport) as (targets, _):
        bare = walog._loop.run(
            _quorum_round_trips(targets, quorum, seconds, entry_bytes, transport)
        )
    with _echo_servers(servers, sync_dir, transport=transport) as (targets, pids):
        pids = [os.getpid(), *pids]
        before = sum(cpu_seconds(pid) for pid in pids)
        synced = walog._loop.run(
            _quorum_round_trips(targets, quorum, seconds, entry_bytes, transport)
        )
        used = sum(cpu_seconds(pid) for pid in pids) - before
    return QuorumFloor(bare, synced, used / (synced.count + WARM_UP_ROUNDS))

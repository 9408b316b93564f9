"""Real bookie processes for tests: start, wait until SERVING, SIGTERM / SIGKILL, logs.

Each bookie runs as ``python -m bookie`` with ``PYTHONPATH`` set to the repository root;
its stderr (JSON log lines) goes to ``<data_dir>.log`` so a failing test can show it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from walog.digest import entry_digest, master_key
from walog.proto import bookie_pb2 as pb
from walog.proto import bookie_pb2_grpc as pb_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BookieProcess:
    """One bookie process (not started until :meth:`start`).

    Args:
        data_dir: the bookie's ``--data-dir``.
        metadata: the ``--metadata`` URI.
        port: the port on 127.0.0.1 (a free one when None); the bookie id is
            ``127.0.0.1:PORT`` and stays the same across restarts.
        extra_args: more flags, e.g. ``["--allow-format"]``.
    """

    def __init__(
        self,
        data_dir: Path,
        metadata: str,
        *,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.metadata = metadata
        self.port = port if port is not None else free_port()
        self.extra_args = list(extra_args)
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel_credentials: grpc.ChannelCredentials | None = None
        """Set for a TLS bookie: :meth:`wait_ready` then connects with these."""

    @property
    def bookie_id(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    def command(self, extra_args: Sequence[str] = ()) -> list[str]:
        """The command line that starts this bookie."""
        return [
            sys.executable, "-m", "bookie",
            "--data-dir", str(self.data_dir),
            "--listen", self.bookie_id,
            "--metadata", self.metadata,
            *self.extra_args, *extra_args,
        ]  # fmt: skip

    def start(self, extra_args: Sequence[str] = ()) -> BookieProcess:
        """Start the process (without waiting for it to serve)."""
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(extra_args), stdout=log, stderr=log, env=env, cwd=REPO_ROOT
            )
        return self

    def log(self) -> str:
        """Everything the process wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def channel(self) -> grpc.Channel:
        """A blocking channel to the bookie (TLS when :attr:`channel_credentials` is set)."""
        if self.channel_credentials is None:
            return grpc.insecure_channel(self.bookie_id)
        return grpc.secure_channel(self.bookie_id, self.channel_credentials)

    def wait_ready(self, timeout: float = 30.0) -> BookieProcess:
        """Block until the health service reports SERVING.

        Raises:
            RuntimeError: the process exited or did not serve in time (with its log).
        """
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout
        with self.channel() as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"bookie {self.bookie_id} exited with {self.proc.returncode}:\n{self.log()}"
                    )
                with contextlib.suppress(grpc.RpcError):
                    # wait_for_ready blocks on the connection attempt itself (no polling
                    # sleep); the short deadline lets us notice a crashed process.
                    reply = stub.Check(
                        health_pb2.HealthCheckRequest(), timeout=0.5, wait_for_ready=True
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return self
        raise RuntimeError(f"bookie {self.bookie_id} not serving after {timeout}s:\n{self.log()}")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> int:
        """SIGKILL and reap; return the exit status."""
        self.signal(signal.SIGKILL)
        return self.wait()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (clean shutdown) and wait; return the exit status."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit; return its status."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def restart(self, extra_args: Sequence[str] = ()) -> BookieProcess:
        """Start again on the same port and directories and wait until serving."""
        return self.start(extra_args).wait_ready()

    def stop_quietly(self) -> None:
        """Kill the process if it still runs (test teardown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def running_bookie(
    data_dir: Path, metadata: str, *, extra_args: Sequence[str] = ()
) -> Iterator[BookieProcess]:
    """A started, serving bookie, killed at the end if still running."""
    bookie = BookieProcess(data_dir, metadata, extra_args=extra_args)
    try:
        yield bookie.start().wait_ready()
    finally:
        bookie.stop_quietly()


def make_add(
    ledger_id: int,
    entry_id: int,
    data: bytes,
    *,
    lac: int = -1,
    password: bytes = b"",
    durability: int = pb.PERSISTENT,
    recovery: bool = False,
    digest: int | None = None,
) -> pb.AddEntry:
    """An add request with a correct digest (unless ``digest`` is given)."""
    return pb.AddEntry(
        entry=pb.Entry(
            ledger_id=ledger_id,
            entry_id=entry_id,
            lac=lac,
            data=data,
            digest=entry_digest(ledger_id, entry_id, lac, data) if digest is None else digest,
        ),
        master_key=master_key(password),
        recovery=recovery,
        durability=durability,  # type: ignore[arg-type]
    )


async def send_frames(
    stub: pb_grpc.BookieStub, frames: Sequence[pb.AddFrame]
) -> tuple[list[pb.AddResult], list[pb.ForceResult]]:
    """Send frames on one add stream, half-close, and collect every result."""
    call = stub.Add()
    for frame in frames:
        await call.write(frame)
    await call.done_writing()
    results: list[pb.AddResult] = []
    forces: list[pb.ForceResult] = []
    async for response in call:
        results.extend(response.results)
        forces.extend(response.forces)
    return results, forces


__all__ = [
    "REPO_ROOT",
    "BookieProcess",
    "free_port",
    "make_add",
    "running_bookie",
    "send_frames",
]

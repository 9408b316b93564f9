"""One bookie process on this host: start, wait until it serves, signals, restart."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from walog.errors import WalogError
from walog.metadata.sqlite import is_busy
from walog.metadata.uri import SqliteURI, parse_uri

_LOG_TAIL_LINES = 25


class LocalClusterError(WalogError, RuntimeError):
    """A local bookie failed to start, stop or become ready (the message holds the end of
    its log)."""


class _NotReady(Exception):
    """The bookie runs but is not ready yet (retried until the timeout)."""


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000
_handed_out: set[tuple[str, int]] = set()


def _port_range() -> range:
    """Where :func:`free_port` looks: below the kernel's ephemeral range, in the slice of
    this pytest-xdist worker (empty when the ephemeral range leaves too little room).
    ``WALOG_TEST_PORT_SLICES`` and ``WALOG_TEST_PORT_SLICE`` keep test runs that go on side
    by side apart: the range is cut into that many slices, and this run's workers take
    theirs from that one on."""
    try:
        end = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        end = 32768  # Linux's default ephemeral range starts here
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    # Test runs side by side (./test's) split the range further: slices in all, and the
    # first of this run's.
    slices = max(int(os.environ.get("WALOG_TEST_PORT_SLICES", "0") or 0), workers, 1)
    first = int(os.environ.get("WALOG_TEST_PORT_SLICE", "0") or 0)
    width = (end - _LOWEST_PORT) // slices
    index = first + (int(worker) % workers if worker.isdigit() else 0)
    start = _LOWEST_PORT + (index % slices) * width
    return range(start, start + width) if width >= 500 else range(0)


def freeze(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGSTOP ``proc`` and return once every thread of it is stopped.

    The signal is sent at once but a thread running on another CPU stops a moment later,
    and may answer a request sent meanwhile: a test that pauses a server and then expects
    silence waits here for it. A process that exits meanwhile ends the wait too.
    """
    proc.send_signal(signal.SIGSTOP)
    tasks = Path(f"/proc/{proc.pid}/task")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the kernel's view, polled: no event to await
        try:
            threads = list(tasks.iterdir())
        except FileNotFoundError:
            return  # the process is gone
        states = []
        for task in threads:
            try:
                # "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
                states.append((task / "stat").read_text().rpartition(")")[2].split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # that thread ended
        if all(state in ("T", "t", "Z", "X") for state in states):
            return
        time.sleep(0.001)
    raise TimeoutError(f"process {proc.pid} did not stop within {timeout:g}s of SIGSTOP")


def metadata_write_locked(metadata_uri: str) -> bool:
    """Whether some process holds the write lock of an SQLite store's file for longer than
    a live writer would (0.2 s); always False for other stores."""
    uri = parse_uri(metadata_uri)
    if not isinstance(uri, SqliteURI):
        return False
    conn = sqlite3.connect(uri.path, timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            return True
        raise
    finally:
        conn.close()


def freeze_outside_metadata_writes(
    proc: subprocess.Popen[Any], metadata_uri: str, attempts: int = 100
) -> None:
    """:func:`freeze` ``proc`` at a moment it holds no write lock of the SQLite store of
    ``metadata_uri`` (another store: at once). Frozen inside a write transaction (its
    heartbeat's, say) it would stall every other process's metadata writes: SQLite's limit
    (docs/operations.md), not the fault a test means. It is let run and frozen anew until
    then.

    Raises:
        LocalClusterError: it held the lock at each of ``attempts`` freezes.
    """
    for _ in range(attempts):
        freeze(proc)
        if not metadata_write_locked(metadata_uri):
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.01)
    raise LocalClusterError(
        f"process {proc.pid} held the metadata file's write lock at each of {attempts} "
        "attempts to freeze it"
    )


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on, for a server about to start.

    It is chosen below the kernel's ephemeral range: outgoing connections take their local
    ports from that range, so one of them cannot take the port before the server binds it
    (a port the kernel hands out for ``bind(0)`` can be). Each pytest-xdist worker picks
    from a slice of its own, and no port is handed out twice by one process.
    """
    ports = _port_range()
    for _ in range(200 if ports else 0):
        port = random.choice(ports)
        if (host, port) not in _handed_out and _bindable(host, port):
            _handed_out.add((host, port))
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # the kernel's choice
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _package_root() -> Path:
    """The directory holding the ``walog`` and ``bookie`` packages (for PYTHONPATH)."""
    return Path(__file__).resolve().parents[2]


class BookieProcess:
    """One ``python -m bookie`` process (not started until :meth:`start`).

    The port and directories stay the same across restarts, so the bookie id does too.
    stdout and stderr are appended to :attr:`log_path`.

    Args:
        data_dir: the bookie's ``--data-dir``.
        metadata: the ``--metadata`` URI.
        port: the port to listen on (a free one when None).
        host: the address to listen on; the bookie id is ``HOST:PORT``.
        extra_args: more flags for every start, e.g. ``["--group-wait-s", "0.002"]``.
        log_path: where output goes (default: ``<data_dir>.log`` beside the data directory).
        command_prefix: what runs the command, e.g. ``["ip", "netns", "exec", NS]`` for a
            bookie on another host (:class:`walog.testing.HostCluster`).
        exit_with_owner: start the bookie with ``--exit-with`` the PID of the process that
            starts it, so it shuts down once that process is gone, even killed with SIGKILL.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        metadata: str,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        extra_args: Sequence[str] = (),
        log_path: str | os.PathLike[str] | None = None,
        command_prefix: Sequence[str] = (),
        exit_with_owner: bool = True,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.metadata = metadata
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.extra_args = list(extra_args)
        self.command_prefix = list(command_prefix)
        self.exit_with_owner = exit_with_owner
        self.log_path = (
            Path(log_path)
            if log_path is not None
            else self.data_dir.with_name(self.data_dir.name + ".log")
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel_credentials: grpc.ChannelCredentials | None = None
        """Set for a TLS bookie: :meth:`channel` and :meth:`wait_ready` then use them."""
        self.paused = False
        self.started_at = 0.0
        """Wall-clock time of the last :meth:`start`."""
        self._log_offset = 0

    @property
    def bookie_id(self) -> str:
        """``HOST:PORT``."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the process exists (also while paused)."""
        return self.proc is not None and self.proc.poll() is None

    def command(self, extra_args: Sequence[str] = ()) -> list[str]:
        """The command line that starts this bookie."""
        return [
            *self.command_prefix,
            sys.executable, "-m", "bookie",
            "--data-dir", str(self.data_dir),
            "--listen", self.bookie_id,
            "--metadata", self.metadata,
            *self.extra_args, *extra_args,
        ]  # fmt: skip

    def start(self, extra_args: Sequence[str] = ()) -> BookieProcess:
        """Start the process (without waiting for it to serve); ``extra_args`` for this
        start only (e.g. ``["--allow-format"]``)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        owner = ["--exit-with", str(os.getpid())] if self.exit_with_owner else []
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_package_root()), env.get("PYTHONPATH", "")) if p
        )
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            self.started_at = time.time()
            # Same process group as its owner: a Ctrl-C or a group-wide SIGTERM (`timeout`,
            # CI cancellation) reaches the bookie too, which shuts down cleanly on either.
            # A signal to the owner alone (SIGKILL of its PID) reaches no one: for that the
            # bookie watches the owner (--exit-with, a pidfd: the process, not the thread
            # that started it) and shuts down just as cleanly once it is gone.
            self.proc = subprocess.Popen(
                self.command([*owner, *extra_args]),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.paused = False
        return self

    def log(self) -> str:
        """Everything the process (all its starts) wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines written since the last :meth:`start`."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def channel(self) -> grpc.Channel:
        """A blocking channel to the bookie (TLS when :attr:`channel_credentials` is set)."""
        if self.channel_credentials is None:
            return grpc.insecure_channel(self.bookie_id)
        return grpc.secure_channel(self.bookie_id, self.channel_credentials)

    def wait_ready(
        self, timeout: float = 30.0, *, until: Callable[[], bool] | None = None
    ) -> BookieProcess:
        """Block until the health service reports SERVING (and ``until()`` is true).

        Raises:
            LocalClusterError: the process is not running, exited, or was not ready in
                time; the message holds the end of its log.
        """
        if self.proc is None:
            raise LocalClusterError(f"bookie {self.bookie_id} was never started")
        retrying = Retrying(
            retry=retry_if_exception_type(_NotReady),
            stop=stop_after_delay(timeout),
            wait=wait_exponential(multiplier=0.02, max=0.25),
            reraise=True,
        )
        with self.channel() as channel:
            health = health_pb2_grpc.HealthStub(channel)
            try:
                for attempt in retrying:
                    with attempt:
                        self._check_ready(health, until)
            except _NotReady as exc:
                raise LocalClusterError(
                    f"bookie {self.bookie_id} was not ready within {timeout}s ({exc})"
                    f"{self._tail_text()}"
                ) from None
        return self

    def _check_ready(
        self, health: health_pb2_grpc.HealthStub, until: Callable[[], bool] | None
    ) -> None:
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            raise LocalClusterError(
                f"bookie {self.bookie_id} exited with status {code} while starting"
                f"{self._tail_text()}"
            )
        if self.paused:
            raise _NotReady("it is paused")
        try:
            # wait_for_ready: the call itself waits for the connection (up to its deadline).
            reply = health.Check(health_pb2.HealthCheckRequest(), timeout=0.5, wait_for_ready=True)
        except grpc.RpcError as exc:
            raise _NotReady(f"health check: {exc.code().name}") from None
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            raise _NotReady("health check: not SERVING yet")
        if until is not None and not until():
            raise _NotReady("serving but not yet registered in the metadata store")

    def _tail_text(self) -> str:
        tail = self.log_tail()
        return f"; log {self.log_path}, last lines:\n{tail}" if tail else f"; log {self.log_path}"

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process."""
        if self.proc is None:
            raise LocalClusterError(f"bookie {self.bookie_id} was never started")
        self.proc.send_signal(sig)

    def kill(self) -> int:
        """SIGKILL (a crash) and reap; return the exit status."""
        self.signal(signal.SIGKILL)
        self.paused = False
        return self.wait()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (clean shutdown) and wait; return the exit status. A paused bookie is
        resumed first so it can shut down."""
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): its port stays open but nothing answers (from the
        moment this returns). On an SQLite store, never inside one of its metadata writes
        (:func:`freeze_outside_metadata_writes`)."""
        if self.proc is None:
            raise LocalClusterError(f"bookie {self.bookie_id} was never started")
        freeze_outside_metadata_writes(self.proc, self.metadata)
        self.paused = True

    def resume(self) -> None:
        """Let a paused process run again (SIGCONT)."""
        self.signal(signal.SIGCONT)
        self.paused = False

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit; return its status."""
        if self.proc is None:
            raise LocalClusterError(f"bookie {self.bookie_id} was never started")
        return self.proc.wait(timeout)

    def restart(self, extra_args: Sequence[str] = ()) -> BookieProcess:
        """Start again on the same port and directories and wait until serving."""
        return self.start(extra_args).wait_ready()

    def stop_quietly(self) -> None:
        """Kill the process if it still runs (teardown)."""
        if self.running and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
        self.paused = False


__all__ = ["BookieProcess", "LocalClusterError", "free_port"]

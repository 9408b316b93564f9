"""A local walog cluster of real bookie processes, for your own tests and for demos.

:class:`LocalCluster` starts ``python -m bookie`` processes on free loopback ports, all
registered in one metadata store: an SQLite file it creates (the default) or a running
ZooKeeper you name with a ``zk://`` URI. It gives you the metadata URI to connect with and
lets a test crash, stop, freeze and restart bookies::

    from walog.testing import LocalCluster
    import walog

    with LocalCluster(bookies=3) as cluster:
        with walog.connect(cluster.metadata_uri) as client:
            with client.create_ledger() as ledger:
                ledger.append(b"hello")
            cluster.kill(0)        # SIGKILL: acknowledged entries survive a restart
            cluster.restart(0)

Bookies are addressed by index (0, 1, ... in start order) or by bookie id (``HOST:PORT``).
Each bookie keeps its port and data directory for the cluster's life, so a restarted bookie
comes back with the same id and its data. Every bookie's output goes to
``<data_dir>/logs/bookie-<n>.log``; a bookie that fails to start raises
:class:`LocalClusterError` with the tail of that log.

The bookies speak plaintext gRPC without authentication: the cluster is for tests on one
host, not for production.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from walog.errors import WalogError
from walog.metadata.layout import bookie_path

if TYPE_CHECKING:
    from walog._sync import LoopThread
    from walog.client import Client
    from walog.metadata.store import MetadataStore

BookieRef = int | str
"""A bookie's index in start order, or its id ``HOST:PORT``."""

_LOG_TAIL_LINES = 25
# Messages a bookie prints when its port was taken between our probe and its bind.
_PORT_TAKEN_HINTS = ("address already in use", "(in use?)", "failed to bind")


class LocalClusterError(WalogError):
    """A bookie of a :class:`LocalCluster` failed to start, stop or become ready."""


class _NotReady(Exception):
    """Internal: the bookie is alive but not yet serving and registered."""


@dataclasses.dataclass
class _Bookie:
    """One bookie slot: fixed port and directories; the process changes on restart."""

    index: int
    host: str
    port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    spawned_at: float = 0.0
    log_offset: int = 0
    paused: bool = False

    @property
    def bookie_id(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _free_port(host: str, taken: set[int]) -> int:
    """A port nothing listens on now (the kernel's choice), not already used by us."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            taken.add(port)
            return port


def _package_root() -> Path:
    """The directory holding the ``walog`` and ``bookie`` packages (for PYTHONPATH)."""
    return Path(__file__).resolve().parent.parent


def _terminate_all(bookies: list[_Bookie]) -> None:
    """Last-resort cleanup when a cluster is garbage-collected or the interpreter exits."""
    for bookie in bookies:
        if bookie.running and bookie.process is not None:
            with contextlib.suppress(ProcessLookupError):
                bookie.process.kill()
            bookie.process.wait()


class LocalCluster:
    """Real bookie processes plus a metadata store, on this host.

    Args:
        bookies: how many bookies to start.
        metadata: ``"sqlite"`` (an SQLite store created in the data directory),
            a ``zk://HOST:PORT/CHROOT`` URI of a running ZooKeeper, or any other metadata URI.
        data_dir: where bookie data and logs go; kept after :meth:`close`. Default: a
            temporary directory, removed by :meth:`close`.
        host: the loopback address the bookies listen on (their ids are ``HOST:PORT``).
        bookie_args: extra flags for every bookie (for example ``["--group-wait-ms", "2"]``).
        start_timeout: seconds a bookie may take to serve and register.

    Use it as a context manager (or call :meth:`start` and :meth:`close`).
    """

    def __init__(
        self,
        bookies: int = 3,
        metadata: str = "sqlite",
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        bookie_args: Sequence[str] = (),
        start_timeout: float = 60.0,
    ) -> None:
        if bookies < 0:
            raise ValueError(f"bookies must be >= 0, got {bookies}")
        if start_timeout <= 0:
            raise ValueError(f"start_timeout must be > 0 seconds, got {start_timeout}")
        self._initial = bookies
        self._host = host
        self._bookie_args = list(bookie_args)
        self._start_timeout = start_timeout
        self._owns_dir = data_dir is None
        self.data_dir = Path(
            tempfile.mkdtemp(prefix="walog-cluster-") if data_dir is None else data_dir
        ).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if metadata == "sqlite":
            metadata = f"sqlite:///{self.data_dir / 'meta.db'}"
        self._metadata_uri = metadata
        self._bookies: list[_Bookie] = []
        self._ports: set[int] = set()
        self._loop: LoopThread | None = None
        self._store: MetadataStore | None = None
        self._closed = False
        self._finalizer = weakref.finalize(self, _terminate_all, self._bookies)

    # -- properties ---------------------------------------------------------------------

    @property
    def metadata_uri(self) -> str:
        """The URI clients connect with (``walog.connect(cluster.metadata_uri)``)."""
        return self._metadata_uri

    @property
    def bookie_ids(self) -> list[str]:
        """Ids of every bookie ever started, in start order (running or not)."""
        return [bookie.bookie_id for bookie in self._bookies]

    def bookie_dir(self, ref: BookieRef) -> Path:
        """The bookie's ``--data-dir``."""
        return self._bookie(ref).data_dir

    def log_path(self, ref: BookieRef) -> Path:
        """The file the bookie's stdout and stderr go to (appended across restarts)."""
        return self._bookie(ref).log_path

    def pid(self, ref: BookieRef) -> int | None:
        """The bookie's process id while it runs (also while paused), else None."""
        bookie = self._bookie(ref)
        return bookie.process.pid if bookie.running and bookie.process is not None else None

    def is_running(self, ref: BookieRef) -> bool:
        """True while the bookie's process exists (paused counts as running)."""
        return self._bookie(ref).running

    def is_paused(self, ref: BookieRef) -> bool:
        """True between :meth:`pause` and :meth:`resume` (or the bookie's end)."""
        bookie = self._bookie(ref)
        return bookie.running and bookie.paused

    # -- life cycle -----------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> LocalCluster:
        """Open the metadata store and start the bookies: all at once, then wait for all.

        Raises:
            LocalClusterError: a bookie exited or was not ready within ``start_timeout``
                (the message holds the tail of its log); the cluster is closed.
            ValueError: the metadata URI is malformed.
        """
        if self._closed:
            raise LocalClusterError("this LocalCluster was closed; create a new one")
        try:
            self._open_store()
            fresh = [self._new_slot() for _ in range(self._initial)]
            for bookie in fresh:
                self._spawn(bookie)
            for bookie in fresh:
                self._wait_started(bookie)
        except BaseException:
            self.close()
            raise
        return self

    def add_bookie(self, *, wait: bool = True) -> str:
        """Start one more bookie (new port, new data directory) and return its id."""
        self._check_open()
        bookie = self._new_slot()
        self._spawn(bookie)
        if wait:
            self._wait_started(bookie)
        return bookie.bookie_id

    def kill(self, ref: BookieRef) -> None:
        """Crash the bookie: SIGKILL, no clean shutdown (its registration lingers until the
        metadata session expires)."""
        bookie = self._running(ref)
        assert bookie.process is not None
        bookie.process.kill()
        bookie.process.wait()
        bookie.paused = False

    def stop(self, ref: BookieRef, timeout: float = 30.0) -> None:
        """Shut the bookie down cleanly: SIGTERM, then wait for it to exit with status 0.

        Raises:
            LocalClusterError: it exited with another status, or not within ``timeout``
                (it is then killed).
        """
        bookie = self._running(ref)
        assert bookie.process is not None
        if bookie.paused:
            self.resume(ref)
        bookie.process.terminate()
        try:
            code = bookie.process.wait(timeout)
        except subprocess.TimeoutExpired:
            bookie.process.kill()
            bookie.process.wait()
            raise LocalClusterError(
                f"bookie {bookie.bookie_id} did not exit within {timeout}s of SIGTERM "
                f"(killed){self._tail(bookie)}"
            ) from None
        if code != 0:
            raise LocalClusterError(
                f"bookie {bookie.bookie_id} exited with status {code} after SIGTERM"
                f"{self._tail(bookie)}"
            )

    def pause(self, ref: BookieRef) -> None:
        """Freeze the bookie (SIGSTOP): its port stays open but nothing answers."""
        bookie = self._running(ref)
        assert bookie.process is not None
        bookie.process.send_signal(signal.SIGSTOP)
        bookie.paused = True

    def resume(self, ref: BookieRef) -> None:
        """Let a paused bookie run again (SIGCONT)."""
        bookie = self._running(ref)
        assert bookie.process is not None
        bookie.process.send_signal(signal.SIGCONT)
        bookie.paused = False

    def restart(self, ref: BookieRef, *, wait: bool = True, extra_args: Sequence[str] = ()) -> None:
        """Start the bookie again on its port and data directory.

        A bookie that still runs is first stopped cleanly (:meth:`stop`); after
        :meth:`kill` it restarts from whatever its disk holds. ``extra_args`` are added
        to this start only (for example ``["--allow-format"]`` after wiping its disk).
        """
        self._check_open()
        bookie = self._bookie(ref)
        if bookie.running:
            self.stop(ref)
        self._spawn(bookie, extra_args)
        if wait:
            self.wait_ready(ref)

    def wait_ready(self, ref: BookieRef, timeout: float | None = None) -> None:
        """Wait until the bookie answers SERVING on the gRPC health service **and** this
        process of it is registered as available in the metadata store.

        Raises:
            LocalClusterError: the bookie is not running, exited meanwhile, or did not get
                ready within ``timeout`` (default: the cluster's ``start_timeout``).
        """
        bookie = self._running(ref)
        limit = self._start_timeout if timeout is None else timeout
        with grpc.insecure_channel(bookie.bookie_id) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            retrying = Retrying(
                retry=retry_if_exception_type(_NotReady),
                stop=stop_after_delay(limit),
                wait=wait_exponential(multiplier=0.02, max=0.25),
                reraise=True,
            )
            try:
                for attempt in retrying:
                    with attempt:
                        self._check_ready(bookie, health)
            except _NotReady as exc:
                raise LocalClusterError(
                    f"bookie {bookie.bookie_id} was not ready within {limit}s ({exc})"
                    f"{self._tail(bookie)}"
                ) from None

    def connect(self, **kwargs: Any) -> Client:
        """``walog.connect(self.metadata_uri, **kwargs)``."""
        from walog.client import connect

        return connect(self.metadata_uri, **kwargs)

    def close(self) -> None:
        """Stop every bookie (SIGTERM, SIGKILL after 15 s), close the metadata store and
        remove the data directory if it is a temporary one. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        running = [b for b in self._bookies if b.running and b.process is not None]
        for bookie in running:
            assert bookie.process is not None
            with contextlib.suppress(ProcessLookupError):
                if bookie.paused:
                    bookie.process.send_signal(signal.SIGCONT)
                bookie.process.terminate()
        for bookie in running:
            assert bookie.process is not None
            try:
                bookie.process.wait(15.0)
            except subprocess.TimeoutExpired:
                bookie.process.kill()
                bookie.process.wait()
        self._finalizer.detach()
        if self._store is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.run(self._store.close(), timeout=10.0)
        if self._loop is not None:
            self._loop.stop()
        self._store = None
        self._loop = None
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, ref: BookieRef, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines the bookie's current process wrote."""
        bookie = self._bookie(ref)
        try:
            with bookie.log_path.open("rb") as log:
                log.seek(bookie.log_offset)
                text = log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- internals ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LocalClusterError("this LocalCluster is closed")
        if self._store is None:
            raise LocalClusterError("this LocalCluster is not started; call start() first")

    def _bookie(self, ref: BookieRef) -> _Bookie:
        if isinstance(ref, bool) or not isinstance(ref, int | str):
            raise TypeError(f"a bookie is an index or an id 'HOST:PORT', got {ref!r}")
        if isinstance(ref, int):
            if not 0 <= ref < len(self._bookies):
                raise IndexError(f"no bookie {ref}: the cluster has {len(self._bookies)}")
            return self._bookies[ref]
        for bookie in self._bookies:
            if bookie.bookie_id == ref:
                return bookie
        raise KeyError(f"no bookie {ref!r} in this cluster ({', '.join(self.bookie_ids)})")

    def _running(self, ref: BookieRef) -> _Bookie:
        bookie = self._bookie(ref)
        if not bookie.running:
            raise LocalClusterError(f"bookie {bookie.bookie_id} is not running")
        return bookie

    def _open_store(self) -> None:
        from walog._sync import LoopThread
        from walog.metadata import open_store

        self._loop = LoopThread(name="walog-local-cluster")
        self._store = self._loop.run(open_store(self._metadata_uri), timeout=60.0)

    def _new_slot(self) -> _Bookie:
        index = len(self._bookies)
        bookie = _Bookie(
            index=index,
            host=self._host,
            port=_free_port(self._host, self._ports),
            data_dir=self.data_dir / "bookies" / str(index),
            log_path=self.data_dir / "logs" / f"bookie-{index}.log",
        )
        self._bookies.append(bookie)
        return bookie

    def _spawn(self, bookie: _Bookie, extra_args: Sequence[str] = ()) -> None:
        bookie.data_dir.mkdir(parents=True, exist_ok=True)
        bookie.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_package_root()), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        argv = [
            sys.executable,
            "-m",
            "bookie",
            "--data-dir",
            str(bookie.data_dir),
            "--listen",
            bookie.bookie_id,
            "--metadata",
            self._metadata_uri,
            *self._bookie_args,
            *extra_args,
        ]
        with bookie.log_path.open("ab") as log:
            bookie.log_offset = log.tell()
            bookie.spawned_at = time.time()
            # A session of its own: a Ctrl-C meant for the test run does not reach the
            # bookies; close() shuts them down in order instead.
            bookie.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        bookie.paused = False

    def _wait_started(self, bookie: _Bookie) -> None:
        """Wait for a freshly spawned bookie; move it to a new port when its port was taken
        by someone else in the meantime (a race no free-port probe can exclude)."""
        for _ in range(3):
            try:
                self.wait_ready(bookie.index)
                return
            except LocalClusterError:
                tail = self.log_tail(bookie.index).lower()
                if bookie.running or not any(hint in tail for hint in _PORT_TAKEN_HINTS):
                    raise
            bookie.port = _free_port(self._host, self._ports)
            shutil.rmtree(bookie.data_dir, ignore_errors=True)
            self._spawn(bookie)
        self.wait_ready(bookie.index)

    def _check_ready(self, bookie: _Bookie, health: health_pb2_grpc.HealthStub) -> None:
        assert bookie.process is not None and self._loop is not None
        code = bookie.process.poll()
        if code is not None:
            raise LocalClusterError(
                f"bookie {bookie.bookie_id} exited with status {code} while starting "
                f"(log: {bookie.log_path}){self._tail(bookie)}"
            )
        if bookie.paused:
            raise _NotReady("it is paused")
        try:
            reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
        except grpc.RpcError as exc:
            raise _NotReady(f"health check: {exc.code().name}") from None
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            raise _NotReady("health check: not SERVING yet")
        if not self._loop.run(self._registered_since(bookie), timeout=10.0):
            raise _NotReady("serving but not yet registered in the metadata store")

    async def _registered_since(self, bookie: _Bookie) -> bool:
        """True when the bookie's availability record exists and was written by the
        current process (not left over from a killed one whose session has not expired)."""
        from walog.metadata.store import NodeNotFoundError

        assert self._store is not None
        try:
            raw, _ = await self._store.get(bookie_path(bookie.bookie_id))
        except NodeNotFoundError:
            return False
        try:
            started = json.loads(raw).get("started")
        except (ValueError, AttributeError):
            return True
        return not isinstance(started, int | float) or started >= bookie.spawned_at

    def _tail(self, bookie: _Bookie) -> str:
        tail = self.log_tail(bookie.index)
        return f"; log {bookie.log_path}, last lines:\n{tail}" if tail else ""


__all__ = ["BookieRef", "LocalCluster", "LocalClusterError"]

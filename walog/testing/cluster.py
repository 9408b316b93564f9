"""LocalCluster: several real bookie processes and one metadata store, on this host."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from walog.metadata.layout import bookie_path, read_only_bookie_path
from walog.testing.process import BookieProcess, LocalClusterError, free_port
from walog.testing.tempdirs import owned_temp_dir

if TYPE_CHECKING:
    from walog._loop_thread import LoopThread
    from walog.client import Client
    from walog.metadata.store import MetadataStore

BookieRef = int | str
"""A bookie's index in start order, or its id ``HOST:PORT``."""

# Messages a bookie prints when its port was taken between our probe and its bind.
_PORT_TAKEN_HINTS = ("address already in use", "(in use?)", "failed to bind")


def _terminate_all(bookies: list[BookieProcess]) -> None:
    """Last-resort cleanup when a cluster is garbage-collected or the interpreter exits."""
    for bookie in bookies:
        bookie.stop_quietly()


class LocalCluster:
    """Real bookie processes plus a metadata store, on this host.

    Args:
        bookies: how many bookies to start.
        metadata: ``"sqlite"`` (an SQLite store created in the data directory),
            a ``zk://HOST:PORT/CHROOT`` URI of a running ZooKeeper, or any other metadata URI.
        data_dir: where bookie data and logs go; kept after :meth:`close`. Default: a
            temporary directory, removed by :meth:`close`.
        host: the loopback address the bookies listen on (their ids are ``HOST:PORT``).
        bookie_args: extra flags for every bookie (for example ``["--group-wait-s", "0.002"]``).
        racks: rack names handed out in turn (bookie ``n`` gets ``racks[n % len(racks)]``,
            its ``--rack``); empty: every bookie in the default rack.
        start_timeout: seconds a bookie may take to serve and register.
        metrics: give every bookie a ``--metrics-port`` (see :meth:`metrics_url`).

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
        racks: Sequence[str] = (),
        start_timeout: float = 60.0,
        metrics: bool = False,
    ) -> None:
        if bookies < 0:
            raise ValueError(f"bookies must be >= 0, got {bookies}")
        if start_timeout <= 0:
            raise ValueError(f"start_timeout must be > 0 seconds, got {start_timeout}")
        self._initial = bookies
        self._host = host
        self._bookie_args = list(bookie_args)
        self._racks = list(racks)
        self._start_timeout = start_timeout
        self._owns_dir = data_dir is None
        self.data_dir = (
            owned_temp_dir("walog-cluster-") if data_dir is None else Path(data_dir)
        ).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if metadata == "sqlite":
            metadata = f"sqlite:///{self.data_dir / 'meta.db'}"
        self._metadata_uri = metadata
        self._bookies: list[BookieProcess] = []
        self._metrics = metrics
        self._metrics_ports: dict[int, int] = {}  # bookie index -> its --metrics-port
        self._ports: set[int] = set()
        self._loop: LoopThread | None = None
        self._store: MetadataStore | None = None
        self._closed = False
        self._finalizer = weakref.finalize(self, _terminate_all, self._bookies)

    # -- what a test looks at -----------------------------------------------------------

    @property
    def metadata_uri(self) -> str:
        """The URI clients connect with (``walog.connect(cluster.metadata_uri)``)."""
        return self._metadata_uri

    @property
    def bookie_ids(self) -> list[str]:
        """Ids of every bookie ever started, in start order (running or not)."""
        return [bookie.bookie_id for bookie in self._bookies]

    def bookie(self, ref: BookieRef) -> BookieProcess:
        """The process handle of a bookie (its ``proc``, ``log()``, ``channel()``, ...)."""
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

    def bookie_dir(self, ref: BookieRef) -> Path:
        """The bookie's ``--data-dir``."""
        return self.bookie(ref).data_dir

    def metrics_url(self, ref: BookieRef) -> str:
        """``http://HOST:PORT`` of the bookie's metrics port (``/metrics``, ``/healthz``,
        ``/readyz``); the cluster must have been made with ``metrics=True``."""
        bookie = self.bookie(ref)
        port = self._metrics_ports.get(self._bookies.index(bookie))
        if port is None:
            raise LocalClusterError("bookies serve metrics only in LocalCluster(metrics=True)")
        return f"http://{self._host}:{port}"

    def log_path(self, ref: BookieRef) -> Path:
        """The file the bookie's stdout and stderr go to (appended across restarts)."""
        return self.bookie(ref).log_path

    def log_tail(self, ref: BookieRef, lines: int = 25) -> str:
        """The last ``lines`` lines the bookie's current process wrote."""
        return self.bookie(ref).log_tail(lines)

    def pid(self, ref: BookieRef) -> int | None:
        """The bookie's process id while it runs (also while paused), else None."""
        bookie = self.bookie(ref)
        return bookie.proc.pid if bookie.running and bookie.proc is not None else None

    def is_running(self, ref: BookieRef) -> bool:
        """True while the bookie's process exists (paused counts as running)."""
        return self.bookie(ref).running

    def is_paused(self, ref: BookieRef) -> bool:
        """True between :meth:`pause` and :meth:`resume` (or the bookie's end)."""
        bookie = self.bookie(ref)
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
            fresh = [self._new_bookie() for _ in range(self._initial)]
            for bookie in fresh:
                bookie.start()
            for bookie in fresh:
                self._wait_started(bookie)
        except BaseException:
            self.close()
            raise
        return self

    def add_bookie(self, *, wait: bool = True) -> str:
        """Start one more bookie (new port, new data directory) and return its id."""
        self._check_open()
        bookie = self._new_bookie()
        bookie.start()
        if wait:
            self._wait_started(bookie)
        return bookie.bookie_id

    def kill(self, ref: BookieRef) -> None:
        """Crash the bookie: SIGKILL, no clean shutdown (its registration lingers until the
        metadata session expires)."""
        self._running(ref).kill()

    def stop(self, ref: BookieRef, timeout: float = 30.0) -> None:
        """Shut the bookie down cleanly: SIGTERM, then wait for it to exit with status 0.

        Raises:
            LocalClusterError: it exited with another status, or not within ``timeout``
                (it is then killed).
        """
        bookie = self._running(ref)
        try:
            code = bookie.terminate(timeout)
        except subprocess.TimeoutExpired:
            bookie.stop_quietly()
            raise LocalClusterError(
                f"bookie {bookie.bookie_id} did not exit within {timeout}s of SIGTERM "
                f"(killed); log {bookie.log_path}:\n{bookie.log_tail()}"
            ) from None
        if code != 0:
            raise LocalClusterError(
                f"bookie {bookie.bookie_id} exited with status {code} after SIGTERM; "
                f"log {bookie.log_path}:\n{bookie.log_tail()}"
            )

    def pause(self, ref: BookieRef) -> None:
        """Freeze the bookie (SIGSTOP): its port stays open but nothing answers (never in
        the middle of a write to an SQLite store: see :meth:`BookieProcess.pause`)."""
        self._running(ref).pause()

    def resume(self, ref: BookieRef) -> None:
        """Let a paused bookie run again (SIGCONT)."""
        self._running(ref).resume()

    def restart(self, ref: BookieRef, *, wait: bool = True, extra_args: Sequence[str] = ()) -> None:
        """Start the bookie again on its port and data directory.

        A bookie that still runs is first stopped cleanly (:meth:`stop`); after
        :meth:`kill` it restarts from whatever its disk holds. ``extra_args`` are added
        to this start only (for example ``["--allow-format"]`` after wiping its disk).
        """
        self._check_open()
        bookie = self.bookie(ref)
        if bookie.running:
            self.stop(ref)
        bookie.start(extra_args)
        if wait:
            self.wait_ready(ref)

    def wait_ready(self, ref: BookieRef, timeout: float | None = None) -> None:
        """Wait until the bookie answers SERVING on the gRPC health service **and** its
        current process is registered as available in the metadata store.

        Raises:
            LocalClusterError: the bookie is not running, exited meanwhile, or did not get
                ready within ``timeout`` (default: the cluster's ``start_timeout``).
        """
        bookie = self._running(ref)
        limit = self._start_timeout if timeout is None else timeout
        bookie.wait_ready(limit, until=lambda: self._registered_since_start(bookie))

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
        running = [bookie for bookie in self._bookies if bookie.running]
        for bookie in running:
            with contextlib.suppress(ProcessLookupError):
                if bookie.paused:
                    bookie.resume()
                bookie.signal(signal.SIGTERM)  # all first: they shut down in parallel
        for bookie in running:
            try:
                bookie.wait(15.0)
            except subprocess.TimeoutExpired:
                bookie.stop_quietly()
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

    # -- internals ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LocalClusterError("this LocalCluster is closed")
        if self._store is None:
            raise LocalClusterError("this LocalCluster is not started; call start() first")

    def _running(self, ref: BookieRef) -> BookieProcess:
        bookie = self.bookie(ref)
        if not bookie.running:
            raise LocalClusterError(f"bookie {bookie.bookie_id} is not running")
        return bookie

    def _open_store(self) -> None:
        from walog._loop_thread import LoopThread
        from walog.metadata import open_store

        self._loop = LoopThread(name="walog-local-cluster")
        self._store = self._loop.run(open_store(self._metadata_uri), timeout=60.0)

    def _free_port(self) -> int:
        while (port := free_port(self._host)) in self._ports:
            pass
        self._ports.add(port)
        return port

    def _new_bookie(self) -> BookieProcess:
        index = len(self._bookies)
        bookie = BookieProcess(
            self.data_dir / "bookies" / str(index),
            self._metadata_uri,
            port=self._free_port(),
            host=self._host,
            extra_args=[*self._bookie_args, *self._rack_args(index)],
            log_path=self.data_dir / "logs" / f"bookie-{index}.log",
        )
        self._bookies.append(bookie)
        self._new_metrics_port(bookie)
        return bookie

    def _rack_args(self, index: int) -> list[str]:
        return ["--rack", self._racks[index % len(self._racks)]] if self._racks else []

    def _new_metrics_port(self, bookie: BookieProcess) -> None:
        """Give the bookie a metrics port of its own (with ``metrics=True``)."""
        if self._metrics:
            index = self._bookies.index(bookie)
            self._metrics_ports[index] = port = self._free_port()
            bookie.extra_args = [
                *self._bookie_args,
                *self._rack_args(index),
                "--metrics-port",
                str(port),
            ]

    def _wait_started(self, bookie: BookieProcess) -> None:
        """Wait for a freshly started bookie; move it to a new port when its port was taken
        by someone else in the meantime (a race no free-port probe can exclude)."""
        for _ in range(3):
            try:
                self.wait_ready(bookie.bookie_id)
                return
            except LocalClusterError:
                tail = bookie.log_tail().lower()
                if bookie.running or not any(hint in tail for hint in _PORT_TAKEN_HINTS):
                    raise
            bookie.port = self._free_port()
            self._new_metrics_port(bookie)  # it may have been the metrics port
            shutil.rmtree(bookie.data_dir, ignore_errors=True)
            bookie.start()
        self.wait_ready(bookie.bookie_id)

    def _registered_since_start(self, bookie: BookieProcess) -> bool:
        assert self._loop is not None
        return self._loop.run(self._registered_since(bookie), timeout=10.0)

    async def _registered_since(self, bookie: BookieProcess) -> bool:
        """True when the bookie's availability record (or its read-only one: full disks)
        exists and was written by its current process (not left over from a killed one
        whose session has not expired)."""
        from walog.metadata.store import NodeNotFoundError

        assert self._store is not None
        for path in (bookie_path(bookie.bookie_id), read_only_bookie_path(bookie.bookie_id)):
            try:
                raw, _ = await self._store.get(path)
                break
            except NodeNotFoundError:
                continue
        else:
            return False
        try:
            started = json.loads(raw).get("started")
        except (ValueError, AttributeError):
            return True
        return not isinstance(started, int | float) or started >= bookie.started_at


__all__ = ["BookieRef", "LocalCluster"]

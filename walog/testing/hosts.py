"""HostCluster: walog across hosts on one machine (network namespaces, a ZooKeeper ensemble).

Hosts (one network namespace each, see :mod:`walog.testing.netns`):

- ``zk1`` .. ``zk3``: a three-node ZooKeeper ensemble (real quorum), one node per rack;
- ``b1`` .. ``bN``: one bookie each, listening on the host's own address (its id is
  ``ADDRESS:3181``), registered with ``--rack rack-K`` (bookie ``n`` in rack ``(n-1) % R + 1``);
- ``c1`` .. ``cM``: client hosts for writers and readers (:meth:`HostCluster.popen`);
- ``ctl``: the cluster's own control host (readiness checks), never faulted.

Faults: isolate a host or a whole rack, cut a link or one way of it, heal; kill, stop,
pause a bookie; stop, kill or pause a ZooKeeper node, the leader, or a quorum. Latency: a
host's connections to other hosts through a userspace delaying proxy
(:meth:`HostCluster.delay`; the kernel here has no ``netem``).

Needs root, ``ip`` and ``nft``; :class:`~walog.testing.netns.HostNetworkError` says in
one line what is missing. Everything is removed by :meth:`HostCluster.close` (also at
interpreter exit); after a SIGKILL, the next HostCluster's start sweeps what was left.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, TypeVar

from walog.metadata.layout import bookie_path
from walog.testing.netns import Host, HostNetwork, call_in_namespace, owner_alive
from walog.testing.process import BookieProcess, LocalClusterError, _package_root
from walog.testing.zookeeper import ZooKeeperNode, wait_for_quorum

if TYPE_CHECKING:
    from walog._sync import LoopThread
    from walog.aio import AsyncClient
    from walog.metadata.store import MetadataStore

BOOKIE_PORT = 3181
_PROXY_PORT = 3999
_PROXY_MARK = 0x77
T = TypeVar("T")


def _rack_name(index: int) -> str:
    return f"rack-{index + 1}"


_DIR_PREFIX = "walog-hosts-"


def sweep_stale_dirs() -> None:
    """Remove the temporary data directories of HostClusters whose process is gone."""
    for path in Path(tempfile.gettempdir()).glob(f"{_DIR_PREFIX}*-*"):
        pid = path.name.removeprefix(_DIR_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not owner_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _teardown(network: HostNetwork, data_dir: Path | None) -> None:
    """Last-resort cleanup (garbage collection or interpreter exit)."""
    network.destroy()
    if data_dir is not None:
        shutil.rmtree(data_dir, ignore_errors=True)


class HostCluster:
    """Bookies, a ZooKeeper ensemble and client hosts, each on a host of its own.

    Args:
        bookies: bookie hosts (one bookie each).
        racks: racks the bookie hosts (and the three ZooKeeper hosts) are spread over.
        clients: client hosts.
        data_dir: where data and logs go (kept); default: a temporary directory (removed).
        bookie_args: extra flags for every bookie.
        session_timeout: ZooKeeper session timeout of the bookies and of
            :attr:`metadata_uri`, seconds.
        start_timeout: seconds the ensemble and each bookie may take to come up.
        subnet: the private /24 the host addresses come from.
    """

    def __init__(
        self,
        bookies: int = 6,
        racks: int = 3,
        clients: int = 2,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        bookie_args: Sequence[str] = (),
        session_timeout: float = 4.0,
        start_timeout: float = 90.0,
        subnet: str = "10.77.0.0/24",
    ) -> None:
        if bookies < 1 or racks < 1 or clients < 0:
            raise ValueError(
                f"need bookies >= 1, racks >= 1, clients >= 0; got {bookies}, {racks}, {clients}"
            )
        if racks > bookies:
            raise ValueError(f"racks={racks} but only {bookies} bookies to put in them")
        self._counts = (bookies, racks, clients)
        self._bookie_args = list(bookie_args)
        self._session_timeout = session_timeout
        self._start_timeout = start_timeout
        self._owns_dir = data_dir is None
        self.data_dir = Path(
            tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-")
            if data_dir is None
            else data_dir
        ).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.network = HostNetwork(secrets.token_hex(3), subnet)
        self.zookeepers: list[ZooKeeperNode] = []
        self._bookies: list[BookieProcess] = []
        self._bookie_hosts: list[Host] = []
        self._loop: LoopThread | None = None
        self._store: MetadataStore | None = None
        self._admin: AsyncClient | None = None
        self._proxies: dict[str, subprocess.Popen[bytes]] = {}
        self._closed = False
        self._finalizer = weakref.finalize(
            self, _teardown, self.network, self.data_dir if self._owns_dir else None
        )
        atexit.register(self._finalizer)

    # -- what a test looks at -----------------------------------------------------------

    @property
    def metadata_uri(self) -> str:
        """``zk://ZK1:2181,ZK2:2181,ZK3:2181/walog?session_timeout=S``, reachable from the
        hosts (not from this process's own network)."""
        return self.uri()

    def uri(self, session_timeout: float | None = None) -> str:
        """:attr:`metadata_uri`, with another session timeout (seconds) when given."""
        hosts = ",".join(node.address for node in self.zookeepers)
        timeout = self._session_timeout if session_timeout is None else session_timeout
        return f"zk://{hosts}/walog?session_timeout={timeout:g}"

    @property
    def bookie_ids(self) -> list[str]:
        """Bookie ids in host order (``b1`` first)."""
        return [bookie.bookie_id for bookie in self._bookies]

    @property
    def racks(self) -> dict[str, str]:
        """Rack of every bookie, by bookie id."""
        return {b.bookie_id: h.rack for b, h in zip(self._bookies, self._bookie_hosts, strict=True)}

    @property
    def client_hosts(self) -> list[str]:
        """Names of the client hosts (``c1`` ...)."""
        return [f"c{i + 1}" for i in range(self._counts[2])]

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        return self.network.host(name)

    def host_of(self, bookie_id: str) -> str:
        """Name of the host a bookie runs on."""
        return self._bookie_hosts[self._index(bookie_id)].name

    def rack_hosts(self, rack: str) -> list[str]:
        """Names of the hosts in ``rack`` (bookies and ZooKeeper nodes)."""
        names = [h.name for h in self.network.hosts.values() if h.rack == rack]
        if not names:
            raise KeyError(f"no rack {rack!r}")
        return names

    def bookie(self, ref: int | str) -> BookieProcess:
        """A bookie's process handle, by index or id."""
        return self._bookies[ref if isinstance(ref, int) else self._index(ref)]

    def _index(self, bookie_id: str) -> int:
        try:
            return self.bookie_ids.index(bookie_id)
        except ValueError:
            raise KeyError(f"no bookie {bookie_id!r} ({', '.join(self.bookie_ids)})") from None

    # -- life cycle -----------------------------------------------------------------------

    def __enter__(self) -> HostCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> HostCluster:
        """Make the hosts, start the ensemble and the bookies, wait until all serve.

        Raises:
            HostNetworkError: namespaces cannot be made here (one line saying why).
            ZooKeeperError: the ensemble did not form a quorum.
            LocalClusterError: a bookie did not come up (with the end of its log).
        """
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        bookies, racks, clients = self._counts
        self.network.create()  # sweeps stale namespaces first
        sweep_stale_dirs()
        self.network.add_host("ctl")
        zk_hosts = [self.network.add_host(f"zk{i + 1}", _rack_name(i % racks)) for i in range(3)]
        members = [(i + 1, host) for i, host in enumerate(zk_hosts)]
        for myid, host in members:
            node = ZooKeeperNode(host, myid, members, self.data_dir / f"zk{myid}")
            self.zookeepers.append(node)
            node.start()
        for i in range(bookies):
            self._bookie_hosts.append(self.network.add_host(f"b{i + 1}", _rack_name(i % racks)))
        for i in range(clients):
            self.network.add_host(f"c{i + 1}")
        wait_for_quorum(self.zookeepers, self._start_timeout)
        self._open_store()
        for host in self._bookie_hosts:
            bookie = BookieProcess(
                self.data_dir / "bookies" / host.name,
                self.metadata_uri,
                port=BOOKIE_PORT,
                host=host.address,
                extra_args=[*self._bookie_args, "--rack", host.rack],
                log_path=self.data_dir / "logs" / f"bookie-{host.name}.log",
                command_prefix=host.exec_prefix(),
            )
            self._bookies.append(bookie)
            bookie.start()
        for bookie in self._bookies:
            self.wait_ready(bookie.bookie_id)

    def _open_store(self) -> None:
        from walog._sync import LoopThread
        from walog.metadata import open_store

        # The loop thread (and the threads it starts) live on the control host.
        self._loop = call_in_namespace(
            self.host("ctl").namespace, lambda: LoopThread(name="walog-host-cluster")
        )
        self._store = self._loop.run(open_store(self.metadata_uri), timeout=60.0)

    def close(self) -> None:
        """Stop the bookies and the ensemble, delete the hosts, remove a temporary data
        directory. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for bookie in self._bookies:
            if bookie.running:
                with contextlib.suppress(ProcessLookupError):
                    if bookie.paused:
                        bookie.resume()
                    bookie.signal(signal.SIGTERM)
        for bookie in self._bookies:
            if bookie.running:
                try:
                    bookie.wait(10.0)
                except subprocess.TimeoutExpired:
                    bookie.stop_quietly()
        if self._admin is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.run(self._admin.close(), timeout=5.0)
        if self._store is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.run(self._store.close(), timeout=5.0)
        if self._loop is not None:
            self._loop.stop()
        for node in self.zookeepers:
            node.kill()
        for proxy in self._proxies.values():
            proxy.kill()
            proxy.wait()
        self._finalizer()
        atexit.unregister(self._finalizer)

    # -- bookies --------------------------------------------------------------------------

    def wait_ready(self, bookie_id: str, timeout: float | None = None) -> None:
        """Wait until the bookie's current process registered itself as available.

        Raises:
            LocalClusterError: it exited, or did not register within ``timeout``.
        """
        bookie = self.bookie(bookie_id)
        limit = self._start_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while not self._registered_since_start(bookie):
            code = bookie.proc.poll() if bookie.proc is not None else None
            if code is not None or time.monotonic() > deadline:
                state = f"exited with status {code}" if code is not None else f"not up in {limit}s"
                raise LocalClusterError(
                    f"bookie {bookie_id} on host {self.host_of(bookie_id)} {state}; "
                    f"log {bookie.log_path}:\n{bookie.log_tail()}"
                )
            time.sleep(0.05)  # polling another process's registration

    def _registered_since_start(self, bookie: BookieProcess) -> bool:
        from walog.errors import MetadataError
        from walog.metadata.store import NodeNotFoundError

        assert self._loop is not None and self._store is not None
        try:
            raw, _ = self._loop.run(self._store.get(bookie_path(bookie.bookie_id)), timeout=10.0)
        except (NodeNotFoundError, MetadataError, TimeoutError):
            return False
        started = json.loads(raw).get("started", 0.0)
        return isinstance(started, int | float) and started >= bookie.started_at

    def kill(self, bookie_id: str) -> None:
        """SIGKILL the bookie (its registration lingers until its session expires)."""
        self.bookie(bookie_id).kill()

    def stop(self, bookie_id: str) -> None:
        """SIGTERM the bookie and wait for it (it unregisters first)."""
        self.bookie(bookie_id).terminate(30.0)

    def pause(self, bookie_id: str) -> None:
        """Freeze the bookie (SIGSTOP)."""
        self.bookie(bookie_id).pause()

    def resume(self, bookie_id: str) -> None:
        """Let a paused bookie run again (SIGCONT)."""
        self.bookie(bookie_id).resume()

    def restart(self, bookie_id: str) -> None:
        """Start a stopped or killed bookie again on its host and data, and wait for it."""
        bookie = self.bookie(bookie_id)
        if bookie.running:
            self.stop(bookie_id)
        bookie.start()
        self.wait_ready(bookie_id)

    # -- network faults -------------------------------------------------------------------

    def isolate(self, *hosts: str) -> None:
        """Cut each host off from every other host (its switch port goes down)."""
        self.network.isolate(*hosts)

    def isolate_rack(self, rack: str) -> None:
        """Cut every host of ``rack`` off from everyone (also from each other)."""
        self.network.isolate(*self.rack_hosts(rack))

    def cut(self, a: str, b: str) -> None:
        """Drop all traffic between hosts ``a`` and ``b``."""
        self.network.cut(a, b)

    def cut_one_way(self, sender: str, receiver: str) -> None:
        """Drop what ``sender`` sends to ``receiver`` (only that direction)."""
        self.network.cut_one_way(sender, receiver)

    def heal(self) -> None:
        """Undo every network fault."""
        self.network.heal()

    def delay(self, host: str, ms: float) -> None:
        """Add ``ms`` milliseconds each way to every TCP connection ``host`` opens to
        another host from now on (a userspace proxy on the host, :mod:`walog.testing.
        delay_proxy`: this kernel has no ``netem``). Connections open already keep their
        path: start the clients after this call."""
        if ms <= 0:
            raise ValueError(f"the delay must be > 0 ms, got {ms}")
        if host in self._proxies:
            raise LocalClusterError(f"host {host} is delayed already; undelay() it first")
        proxy = self.popen(
            host,
            ["python", "-m", "walog.testing.delay_proxy", "--port", str(_PROXY_PORT),
             "--delay-ms", str(ms), "--mark", str(_PROXY_MARK)],
            log=subprocess.PIPE,
        )  # fmt: skip
        assert proxy.stdout is not None
        if not proxy.stdout.readline().startswith(b"delay proxy on port"):
            proxy.kill()
            raise LocalClusterError(f"the delaying proxy on {host} did not start")
        self._proxies[host] = proxy
        self.network.redirect_outgoing(host, _PROXY_PORT, _PROXY_MARK)

    def undelay(self, host: str) -> None:
        """Stop delaying ``host``'s new connections (and end its proxy, which cuts the
        connections that went through it)."""
        proxy = self._proxies.pop(host, None)
        if proxy is None:
            return
        self.network.stop_redirecting(host)
        proxy.kill()
        proxy.wait()

    # -- ZooKeeper ------------------------------------------------------------------------

    def zk_leader(self, timeout: float = 30.0) -> ZooKeeperNode:
        """The ensemble's current leader (waits for a quorum to serve)."""
        return wait_for_quorum([n for n in self.zookeepers if n.running], timeout)

    def zk_node(self, myid: int) -> ZooKeeperNode:
        """Ensemble member ``myid`` (1-3)."""
        return self.zookeepers[myid - 1]

    def stop_zk(self, myid: int) -> None:
        """Stop one ensemble member cleanly."""
        self.zk_node(myid).stop()

    def kill_zk_leader(self) -> int:
        """SIGKILL the current leader; its id."""
        leader = self.zk_leader()
        leader.kill()
        return leader.myid

    def stop_zk_quorum(self) -> list[int]:
        """SIGKILL a majority of the ensemble (the leader among them): no quorum is left;
        the ids stopped."""
        leader = self.zk_leader()
        others = [n for n in self.zookeepers if n is not leader and n.running]
        victims = [leader, *others][: len(self.zookeepers) // 2 + 1]
        for node in victims:
            node.kill()
        return [n.myid for n in victims]

    def start_zk(self, *myids: int, wait: bool = True) -> None:
        """Start stopped members again (all stopped ones without ids); wait for a quorum."""
        for node in self.zookeepers:
            if (not myids or node.myid in myids) and not node.running:
                node.start()
        if wait:
            self.zk_leader(self._start_timeout)

    # -- metadata, from the control host -------------------------------------------------

    def call(self, func: Callable[[AsyncClient], Awaitable[T]], timeout: float = 60.0) -> T:
        """Run ``func(client)`` with a walog client on the control host and return its
        result: for metadata (ledgers, logs, bookies); read entries from a client host."""
        if self._loop is None:
            raise LocalClusterError("this HostCluster is not started")
        loop = self._loop

        async def run() -> T:
            if self._admin is None:
                from walog.aio import connect

                self._admin = await connect(self.metadata_uri)
            return await func(self._admin)

        return loop.run(run(), timeout=timeout)

    # -- processes on hosts ---------------------------------------------------------------

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` on ``host`` (``ip netns exec``)."""
        return [*self.host(host).exec_prefix(), *argv]

    def popen(
        self,
        host: str,
        argv: Sequence[str],
        *,
        log: IO[bytes] | int | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``host`` (a ``python`` first word is this interpreter, with
        walog on its path); stdout and stderr go to ``log``."""
        args = list(argv)
        if args and args[0] == "python":
            args[0] = sys.executable
        full_env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_package_root()), full_env.get("PYTHONPATH", "")) if p
        )
        return subprocess.Popen(
            self.command(host, args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT if log is not None else None,
            env=full_env,
        )


__all__ = ["BOOKIE_PORT", "HostCluster", "sweep_stale_dirs"]

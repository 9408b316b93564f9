"""HostCluster: walog across hosts on one machine (network namespaces, a ZooKeeper ensemble).

Hosts (one network namespace each, see :mod:`walog.testing.netns`):

- ``zk1`` .. ``zk3``: a three-node ZooKeeper ensemble (real quorum), one node per rack;
- ``b1`` .. ``bN``: one bookie each, listening on the host's own address (its id is
  ``ADDRESS:3181``), registered with ``--rack rack-K`` (bookie ``n`` in rack ``(n-1) % R + 1``);
- ``c1`` .. ``cM``: client hosts for writers and readers (:meth:`HostCluster.popen`).

The test process itself is on the hosts' network too, never faulted: it checks readiness
and reads metadata through its own walog client (:meth:`HostCluster.call`).

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
import os
import secrets
import shutil
import signal
import subprocess
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, TypeVar

from walog.testing import tempdirs
from walog.testing.control import ControlHost
from walog.testing.delay_proxy import PROXY_MARK, PROXY_PORT, start_proxy
from walog.testing.netns import Host, HostNetwork
from walog.testing.process import BookieProcess, LocalClusterError
from walog.testing.zookeeper import ZooKeeperEnsemble, ZooKeeperNode

if TYPE_CHECKING:
    from walog.aio import AsyncClient

BOOKIE_PORT = 3181
T = TypeVar("T")


def _rack_name(index: int) -> str:
    return f"rack-{index + 1}"


_DIR_PREFIX = "walog-hosts-"


def sweep_stale_dirs() -> None:
    """Remove the temporary data directories of HostClusters whose process is gone."""
    tempdirs.sweep_stale_dirs(_DIR_PREFIX)


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
        bookie_env: extra environment of some bookies, by host name (e.g. an
            ``LD_PRELOAD`` library that fails one bookie's disk on demand).
        session_timeout: ZooKeeper session timeout of the bookies and of
            :attr:`metadata_uri`, seconds.
        start_timeout: seconds the ensemble and each bookie may take to come up.
        subnet: the private /24 the host addresses come from; None: one that no other
            host cluster on this machine holds (:data:`walog.testing.netns.SUBNETS`).
    """

    def __init__(
        self,
        bookies: int = 6,
        racks: int = 3,
        clients: int = 2,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        bookie_args: Sequence[str] = (),
        bookie_env: Mapping[str, Mapping[str, str]] | None = None,
        session_timeout: float = 4.0,
        start_timeout: float = 90.0,
        subnet: str | None = None,
    ) -> None:
        if bookies < 1 or racks < 1 or clients < 0:
            raise ValueError(
                f"need bookies >= 1, racks >= 1, clients >= 0; got {bookies}, {racks}, {clients}"
            )
        if racks > bookies:
            raise ValueError(f"racks={racks} but only {bookies} bookies to put in them")
        self._counts = (bookies, racks, clients)
        self._bookie_args = list(bookie_args)
        self._bookie_env = {host: dict(env) for host, env in (bookie_env or {}).items()}
        self._session_timeout = session_timeout
        self._start_timeout = start_timeout
        self._owns_dir = data_dir is None
        self.data_dir = (
            tempdirs.owned_temp_dir(_DIR_PREFIX) if data_dir is None else Path(data_dir)
        ).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.network = HostNetwork(secrets.token_hex(3), subnet)
        self.ensemble = ZooKeeperEnsemble([], start_timeout)
        """The ZooKeeper ensemble (its nodes, leader, what stops them)."""
        self._bookies: list[BookieProcess] = []
        self._bookie_hosts: list[Host] = []
        self._control: ControlHost | None = None
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
        hosts and from this process."""
        return self.uri()

    def uri(self, session_timeout: float | None = None) -> str:
        """:attr:`metadata_uri`, with another session timeout (seconds) when given."""
        hosts = ",".join(node.address for node in self.zookeepers)
        timeout = self._session_timeout if session_timeout is None else session_timeout
        return f"zk://{hosts}/walog?session_timeout={timeout:g}"

    @property
    def zookeepers(self) -> list[ZooKeeperNode]:
        """The ensemble's nodes, ``zk1`` first."""
        return self.ensemble.nodes

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
        zk_hosts = [self.network.add_host(f"zk{i + 1}", _rack_name(i % racks)) for i in range(3)]
        members = [(i + 1, host) for i, host in enumerate(zk_hosts)]
        for myid, host in members:
            node = ZooKeeperNode(host, myid, members, self.data_dir / f"zk{myid}")
            self.ensemble.nodes.append(node)
            node.start()
        for i in range(bookies):
            self._bookie_hosts.append(self.network.add_host(f"b{i + 1}", _rack_name(i % racks)))
        for i in range(clients):
            self.network.add_host(f"c{i + 1}")
        self.ensemble.leader(self._start_timeout)
        self._control = ControlHost(self.metadata_uri)
        for host in self._bookie_hosts:
            # --exit-with (BookieProcess's) works here too: the hosts share one PID namespace,
            # and it stops the bookie cleanly where a parent-death signal would kill it.
            env = self._bookie_env.get(host.name, {})
            setting = ["env", *(f"{name}={value}" for name, value in env.items())] if env else []
            bookie = BookieProcess(
                self.data_dir / "bookies" / host.name,
                self.metadata_uri,
                port=BOOKIE_PORT,
                host=host.address,
                extra_args=[*self._bookie_args, "--rack", host.rack],
                log_path=self.data_dir / "logs" / f"bookie-{host.name}.log",
                command_prefix=[*host.exec_prefix(die_with_parent=False), *setting],
            )
            self._bookies.append(bookie)
            bookie.start()
        for bookie in self._bookies:
            self.wait_ready(bookie.bookie_id)

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
        if self._control is not None:
            self._control.close()
        self.ensemble.kill_all()
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
        assert self._control is not None, "start() first"
        while not self._control.registered_since(bookie_id, bookie.started_at):
            code = bookie.proc.poll() if bookie.proc is not None else None
            if code is not None or time.monotonic() > deadline:
                state = f"exited with status {code}" if code is not None else f"not up in {limit}s"
                raise LocalClusterError(
                    f"bookie {bookie_id} on host {self.host_of(bookie_id)} {state}; "
                    f"log {bookie.log_path}:\n{bookie.log_tail()}"
                )
            time.sleep(0.05)  # polling another process's registration

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
        another host from now on: a userspace proxy on the host
        (:mod:`walog.testing.delay_proxy`; the kernel here has no ``netem``). Connections
        open already keep their path: start the clients after this call."""
        if host in self._proxies:
            raise LocalClusterError(f"host {host} is delayed already; undelay() it first")
        self._proxies[host] = start_proxy(self.host(host), ms)
        self.network.redirect_outgoing(host, PROXY_PORT, PROXY_MARK)

    def undelay(self, host: str) -> None:
        """Stop delaying ``host``'s new connections (ending its proxy cuts the ones that
        went through it)."""
        proxy = self._proxies.pop(host, None)
        if proxy is not None:
            self.network.stop_redirecting(host)
            proxy.kill()
            proxy.wait()

    # -- ZooKeeper ------------------------------------------------------------------------

    def zk_leader(self, timeout: float = 30.0) -> ZooKeeperNode:
        """The ensemble's current leader (waits for a quorum to serve)."""
        return self.ensemble.leader(timeout)

    def zk_node(self, myid: int) -> ZooKeeperNode:
        """Ensemble member ``myid`` (1-3)."""
        return self.ensemble.node(myid)

    def kill_zk_leader(self) -> int:
        """SIGKILL the current leader; its id."""
        return self.ensemble.kill_leader()

    def stop_zk_quorum(self) -> list[int]:
        """SIGKILL a majority, the leader among them: no quorum is left; their ids."""
        return self.ensemble.kill_quorum()

    def start_zk(self, *myids: int, wait: bool = True) -> None:
        """Start stopped members again (all without ids); wait for a quorum."""
        self.ensemble.start(*myids, wait=wait)

    # -- metadata, from this process --------------------------------------------------------

    def call(self, func: Callable[[AsyncClient], Awaitable[T]], timeout: float = 60.0) -> T:
        """Run ``func(client)`` with this process's own walog client (on the hosts'
        network, never faulted) and return its result: for metadata (ledgers, logs,
        bookies); read entries from a client host."""
        if self._control is None:
            raise LocalClusterError("this HostCluster is not started")
        return self._control.call(func, timeout)

    # -- processes on hosts ---------------------------------------------------------------

    def popen(
        self,
        host: str,
        argv: Sequence[str],
        *,
        log: IO[bytes] | int | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``host`` (:meth:`walog.testing.netns.Host.popen`)."""
        return self.host(host).popen(argv, log=log, env=env)


__all__ = ["BOOKIE_PORT", "HostCluster", "sweep_stale_dirs"]

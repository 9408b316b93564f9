"""Hosts on one machine: Linux network namespaces joined by a bridge, and faults between them.

:class:`HostNetwork` makes one network namespace per host, each with one interface
(``eth0``) holding the host's own address, plugged into a bridge that lives in a namespace
of its own (the *switch*). The process that makes the network is plugged into the switch
too (:meth:`HostNetwork.create`): one ``veth`` in the machine's own namespace holds the
subnet's last address, so every thread of that process reaches the hosts, whatever
namespace it was started in. That matters for libraries that open connections on threads
of their own (gRPC's event engine does, and would otherwise connect from the machine's
namespace, where the hosts' addresses lead elsewhere). That interface goes with the switch.
Each network takes a /24 of :data:`SUBNETS` that no other live network on the machine holds.

Faults, all undone by :meth:`HostNetwork.heal`:

- :meth:`~HostNetwork.isolate`: the host's switch port goes down (a pulled cable: every
  packet to and from it is lost, no connection is refused or reset).
- :meth:`~HostNetwork.cut`: nftables rules on both hosts drop what they send each other.
- :meth:`~HostNetwork.cut_one_way`: nftables on the sender drops what it sends to the
  receiver; the other way still works (TCP connections between them stall all the same).

Names: every namespace is ``wlh-<owner pid>-<cluster>-<host>``. :func:`sweep_stale`
removes namespaces (and kills the processes in them) whose owner process is gone, so a
test run killed with SIGKILL leaves nothing behind once the next run starts.

Needs root (``CAP_SYS_ADMIN`` and ``CAP_NET_ADMIN``), ``ip`` (iproute2) and ``nft``
(nftables); :func:`check_can_make_hosts` says in one line what is missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

from walog.errors import WalogError
from walog.testing.tempdirs import owner_alive

PREFIX = "wlh"
"""First part of the name of every namespace made here (the sweep looks for it)."""
NETNS_DIR = "/run/netns"
SUBNETS = ipaddress.IPv4Network("10.77.0.0/16")
"""Where networks take their /24 from (:meth:`HostNetwork.create`)."""
_SUBNET_LOCK = "/run/walog-host-subnets.lock"
_CLONE_NEWNET = 0x40000000
_FAULT_TABLE = "walog_faults"
_DELAY_TABLE = "walog_delay"
_NAME = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-")

T = TypeVar("T")


class HostNetworkError(WalogError, RuntimeError):
    """Namespaces, links or rules could not be made or changed (the message says why)."""


def _run(*argv: str, input_text: str | None = None) -> str:
    try:
        done = subprocess.run(argv, input=input_text, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise HostNetworkError(f"{argv[0]} is not installed: {exc}") from exc
    if done.returncode != 0:
        raise HostNetworkError(
            f"{' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''} failed "
            f"(status {done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


def check_can_make_hosts() -> None:
    """Raise :class:`HostNetworkError` with one line saying why hosts cannot be made here
    (not root, ``ip`` or ``nft`` missing, namespaces refused); return when they can."""
    if os.geteuid() != 0:
        raise HostNetworkError(
            "network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); run as root"
        )
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            raise HostNetworkError(f"{tool} not found: apt-get install -y {package}")
    probe = f"{PREFIX}-{os.getpid()}-probe"
    try:
        _run("ip", "netns", "add", probe)
    finally:
        with contextlib.suppress(HostNetworkError):
            _run("ip", "netns", "del", probe)


def kill_namespace(ns: str) -> None:
    """SIGKILL every process in namespace ``ns``, then delete it (no error if it is gone)."""
    with contextlib.suppress(HostNetworkError):
        for pid in _run("ip", "netns", "pids", ns).split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
    with contextlib.suppress(HostNetworkError):
        _run("ip", "netns", "del", ns)


def sweep_stale() -> list[str]:
    """Delete the namespaces made here by processes that are gone (killed before they
    could clean up), with the processes still running in them; return their names."""
    swept = []
    for name in list_namespaces():
        match = _NAME.match(name)
        if match and not owner_alive(int(match["pid"])):
            kill_namespace(name)
            swept.append(name)
    return swept


def list_namespaces() -> list[str]:
    """Names of the network namespaces made here (by any process)."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(f"{PREFIX}-"))


def _subnets_in_use() -> set[ipaddress.IPv4Network]:
    """The /24s of the IPv4 addresses of the machine's own namespace."""
    nets: set[ipaddress.IPv4Network] = set()
    for line in _run("ip", "-4", "-o", "addr", "show").splitlines():
        fields = line.split()
        if "inet" in fields:
            cidr = fields[fields.index("inet") + 1]
            nets.add(ipaddress.IPv4Interface(cidr.split("/")[0] + "/24").network)
    return nets


def call_in_namespace(ns: str, func: Callable[[], T]) -> T:
    """Run ``func`` in a new thread that entered network namespace ``ns``; its result.

    Sockets made by that thread (and threads it starts: they inherit the namespace) belong
    to the host ``ns``; the calling thread is not moved.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            enter_namespace(ns)
            outcome.append(func())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)

    thread = threading.Thread(target=body, name=f"in-{ns}", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def enter_namespace(ns: str) -> None:
    """Move the calling thread into network namespace ``ns`` (``setns(2)``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"{NETNS_DIR}/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise HostNetworkError(f"setns into {ns} failed: {os.strerror(errno)}")
    finally:
        os.close(fd)


@dataclasses.dataclass(frozen=True)
class Host:
    """One host: its name, network namespace, address and rack."""

    name: str
    namespace: str
    address: str
    rack: str = ""

    def exec_prefix(self, *, die_with_parent: bool = True) -> list[str]:
        """The command prefix that runs a program on this host. With ``die_with_parent``
        the program is killed when the thread that started it ends (Linux's parent-death
        signal), so a killed test leaves none running; a program that watches its owner
        itself (a bookie's ``--exit-with``) goes without, and stops cleanly instead."""
        prefix = ["setpriv", "--pdeathsig", "KILL"] if die_with_parent else []
        return [*prefix, "ip", "netns", "exec", self.namespace]

    def popen(
        self,
        argv: Sequence[str],
        *,
        log: IO[bytes] | int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on this host (a ``python`` first word is this interpreter, with
        walog on its path); stdout and stderr go to ``log``."""
        args = list(argv)
        if args and args[0] == "python":
            args[0] = sys.executable
        full_env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
        root = str(Path(__file__).resolve().parents[2])  # holds the walog package
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, full_env.get("PYTHONPATH", "")) if p
        )
        return subprocess.Popen(
            [*self.exec_prefix(), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT if log is not None else None,
            env=full_env,
        )


class HostNetwork:
    """Hosts in network namespaces on one bridge, with faults between them.

    Args:
        name: short name of this network (part of every namespace name): 1-11 lowercase
            letters and digits.
        subnet: the private IPv4 /24 the hosts' addresses come from (``.1`` onwards); None:
            the first /24 of :data:`SUBNETS` that no other network on this machine holds.
    """

    def __init__(self, name: str, subnet: str | None = None) -> None:
        if not re.fullmatch(r"[a-z0-9]{1,11}", name):
            raise ValueError(f"a host network name is 1-11 lowercase letters/digits, got {name!r}")
        self.name = name
        self._wanted = None if subnet is None else ipaddress.IPv4Network(subnet)
        if self._wanted is not None and not (
            self._wanted.is_private and self._wanted.prefixlen == 24
        ):
            raise ValueError(f"the host subnet must be a private /24, got {subnet}")
        self._network = self._wanted or next(SUBNETS.subnets(new_prefix=24))
        self.switch = f"{PREFIX}-{os.getpid()}-{name}-switch"
        self.hosts: dict[str, Host] = {}
        self._isolated: set[str] = set()
        self._ruled: set[str] = set()
        self._made = False

    def _namespace(self, host: str) -> str:
        return f"{PREFIX}-{os.getpid()}-{self.name}-{host}"

    @property
    def subnet(self) -> str:
        """The /24 the hosts' addresses come from (known once :meth:`create` ran)."""
        return str(self._network)

    @property
    def _link(self) -> str:
        """This process's interface on the switch (in the machine's own namespace)."""
        return f"{PREFIX}{self.name}"

    @property
    def uplink(self) -> str:
        """The address of this process on the hosts' network (the subnet's last one)."""
        return str(self._network.broadcast_address - 1)

    def create(self) -> None:
        """Make the switch namespace and its bridge, and plug this process into it (a
        failure leaves nothing behind)."""
        check_can_make_hosts()
        sweep_stale()
        _run("ip", "netns", "add", self.switch)
        self._made = True
        try:
            _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.switch, "link", "set", "br0", "up")
            self._plug_in_this_process()
        except BaseException:
            self.destroy()
            raise

    def _plug_in_this_process(self) -> None:
        """A ``veth`` from the machine's namespace to the switch, holding :attr:`uplink` in
        a /24 no other network here holds (chosen under a lock, so two test processes
        starting networks at once never take the same one). Deleting the switch namespace
        deletes both ends."""
        link = self._link
        _run("ip", "link", "add", link, "type", "veth", "peer", "name", "up0", "netns", self.switch)
        _run("ip", "-n", self.switch, "link", "set", "up0", "master", "br0", "up")
        with open(_SUBNET_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            taken = _subnets_in_use()
            if self._wanted is not None:
                if self._wanted in taken:
                    raise HostNetworkError(
                        f"subnet {self._wanted} is held by another host network on this machine"
                    )
            else:
                free = [n for n in SUBNETS.subnets(new_prefix=24) if n not in taken]
                if not free:
                    raise HostNetworkError(
                        f"every /24 of {SUBNETS} is held by a host network on this machine"
                    )
                self._network = free[0]
            _run("ip", "addr", "add", f"{self.uplink}/{self._network.prefixlen}", "dev", link)
            _run("ip", "link", "set", link, "up")

    def add_host(self, name: str, rack: str = "") -> Host:
        """Make host ``name``: its namespace, loopback, ``eth0`` with the next address,
        plugged into the switch."""
        if not re.fullmatch(r"[a-z0-9]{1,8}", name) or name == "switch":
            raise ValueError(f"a host name is 1-8 lowercase letters/digits, got {name!r}")
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists already")
        hosts = list(self._network.hosts())[:-1]  # the last one is this process's
        if len(self.hosts) >= len(hosts):
            raise HostNetworkError(f"subnet {self._network} is full")
        host = Host(name, self._namespace(name), str(hosts[len(self.hosts)]), rack)
        port = f"v-{name}"
        _run("ip", "netns", "add", host.namespace)
        self.hosts[name] = host
        for command in (
            f"-n {self.switch} link add {port} type veth peer name eth0 netns {host.namespace}",
            f"-n {self.switch} link set {port} master br0 up",
            f"-n {host.namespace} link set lo up",
            f"-n {host.namespace} addr add {host.address}/{self._network.prefixlen} dev eth0",
            f"-n {host.namespace} link set eth0 up",
        ):
            _run("ip", *command.split())
        return host

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        try:
            return self.hosts[name]
        except KeyError:
            raise KeyError(f"no host {name!r} (hosts: {', '.join(self.hosts)})") from None

    # -- faults ---------------------------------------------------------------------------

    def isolate(self, *names: str) -> None:
        """Pull the cable of each host: its switch port goes down."""
        for name in names:
            self.host(name)
            _run("ip", "-n", self.switch, "link", "set", f"v-{name}", "down")
            self._isolated.add(name)

    def reconnect(self, *names: str) -> None:
        """Plug isolated hosts back in."""
        for name in names:
            _run("ip", "-n", self.switch, "link", "set", f"v-{name}", "up")
            self._isolated.discard(name)

    def cut(self, a: str, b: str) -> None:
        """Drop everything between hosts ``a`` and ``b`` (both ways); others unaffected."""
        self.cut_one_way(a, b)
        self.cut_one_way(b, a)

    def cut_one_way(self, sender: str, receiver: str) -> None:
        """Drop what ``sender`` sends to ``receiver``; the other way still gets through."""
        src, dst = self.host(sender), self.host(receiver)
        self._ensure_table(src)
        self._nft(src, f"add rule inet {_FAULT_TABLE} out ip daddr {dst.address} drop")

    def redirect_outgoing(self, name: str, port: int, mark: int) -> None:
        """Send every TCP connection host ``name`` opens to another host to its own
        ``port`` (where a delaying proxy listens), except those marked ``mark``."""
        host = self.host(name)
        self._nft(
            host,
            f"add table ip {_DELAY_TABLE}\n"
            f"add chain ip {_DELAY_TABLE} out {{ type nat hook output priority -100 ; }}\n"
            f"add rule ip {_DELAY_TABLE} out meta mark != {mark} ip daddr {self._network} "
            f"ip daddr != {host.address} meta l4proto tcp redirect to :{port}",
        )

    def stop_redirecting(self, name: str) -> None:
        """Undo :meth:`redirect_outgoing` (connections already redirected stay so)."""
        self._nft(self.host(name), f"delete table ip {_DELAY_TABLE}")

    def heal(self) -> None:
        """Undo every fault: isolated hosts plugged back in, every drop rule removed."""
        self.reconnect(*sorted(self._isolated))
        for name in sorted(self._ruled):
            self._nft(self.host(name), f"delete table inet {_FAULT_TABLE}")
        self._ruled.clear()

    def _ensure_table(self, host: Host) -> None:
        if host.name in self._ruled:
            return
        self._nft(
            host,
            f"add table inet {_FAULT_TABLE}\n"
            f"add chain inet {_FAULT_TABLE} out {{ type filter hook output priority 0 ; }}",
        )
        self._ruled.add(host.name)

    def _nft(self, host: Host, script: str) -> None:
        _run(*host.exec_prefix(), "nft", "-f", "-", input_text=script + "\n")

    # -- end ------------------------------------------------------------------------------

    def destroy(self) -> None:
        """Kill what still runs on the hosts and delete every namespace (idempotent)."""
        for host in list(self.hosts.values()):
            kill_namespace(host.namespace)
        self.hosts.clear()
        if self._made:
            with contextlib.suppress(HostNetworkError):  # gone with the switch anyway, later
                _run("ip", "link", "del", self._link)
            kill_namespace(self.switch)
            self._made = False


__all__ = [
    "PREFIX",
    "Host",
    "HostNetwork",
    "HostNetworkError",
    "call_in_namespace",
    "check_can_make_hosts",
    "enter_namespace",
    "kill_namespace",
    "list_namespaces",
    "sweep_stale",
]

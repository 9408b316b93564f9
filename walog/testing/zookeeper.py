"""A ZooKeeper ensemble on hosts of a :class:`~walog.testing.netns.HostNetwork`.

Each :class:`ZooKeeperNode` is one ``org.apache.zookeeper.server.quorum.QuorumPeerMain``
process on its own host, listening on the host's address (client port 2181, quorum ports
2888/3888), with Debian's jars (``apt-get install -y zookeeper``). A short tick (250 ms)
keeps elections and session timeouts test-sized: sessions from 0.5 s to 15 s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from walog.errors import WalogError
from walog.testing.netns import Host, call_in_namespace
from walog.testing.process import freeze

JAVA_DIR = Path(os.environ.get("WALOG_ZK_JARS", "/usr/share/java"))
CLIENT_PORT = 2181
TICK_MS = 250
_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "commons-cli.jar",
    "metrics-core.jar",
    "snappy-java.jar",
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-common.jar",
    "netty-handler.jar",
    "netty-resolver.jar",
    "netty-transport.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
)


class ZooKeeperError(WalogError, RuntimeError):
    """Java or the ZooKeeper jars are missing, or a node did not come up (with its log)."""


JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1")
"""JVM options of every test ZooKeeper: their runs are short and their load light, and the
optimizing compiler and its threads took a fifth of a server's CPU (start, 200 writes and
reads, stop: 1.15-1.22 CPU-seconds with them, 0.87 without), which test workers then lack."""


def classpath() -> str:
    """The server's class path; :class:`ZooKeeperError` naming what is missing."""
    if shutil.which("java") is None:
        raise ZooKeeperError("java not found: apt-get install -y openjdk-17-jre-headless")
    missing = [jar for jar in _JARS if not (JAVA_DIR / jar).exists()]
    if missing:
        raise ZooKeeperError(
            f"ZooKeeper jars missing from {JAVA_DIR}: {', '.join(missing)}; "
            "apt-get install -y zookeeper"
        )
    return ":".join(str(JAVA_DIR / jar) for jar in _JARS)


def four_letter_word(address: str, word: str, port: int = CLIENT_PORT, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command and return the answer (call it from a thread in
    a host's namespace)."""
    with socket.create_connection((address, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperNode:
    """One ensemble member on its host.

    Args:
        host: where it runs (and the address it listens on).
        myid: its server id (1-255).
        members: every member's ``(myid, host)``, itself included.
        data_dir: its data directory (made on start, kept across restarts).
    """

    def __init__(
        self, host: Host, myid: int, members: Sequence[tuple[int, Host]], data_dir: Path
    ) -> None:
        self.host = host
        self.myid = myid
        self.members = list(members)
        self.data_dir = data_dir
        self.log_path = data_dir.with_name(data_dir.name + ".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def address(self) -> str:
        """``HOST:PORT`` clients connect to."""
        return f"{self.host.address}:{CLIENT_PORT}"

    @property
    def running(self) -> bool:
        """True while the process exists (also while paused)."""
        return self.proc is not None and self.proc.poll() is None

    def _config(self) -> Path:
        servers = "".join(
            f"server.{myid}={member.address}:2888:3888\n" for myid, member in self.members
        )
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={TICK_MS}\n"
            "initLimit=20\nsyncLimit=8\n"
            f"minSessionTimeout={2 * TICK_MS}\nmaxSessionTimeout={60 * TICK_MS}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={CLIENT_PORT}\nclientPortAddress={self.host.address}\n"
            "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat\n"
            "maxClientCnxns=0\n" + servers
        )
        return cfg

    def start(self) -> None:
        """Start the process (it joins the ensemble by itself; see :meth:`mode`)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "myid").write_text(f"{self.myid}\n")
        cmd = [*self.host.exec_prefix(), "java", "-Xmx192m", *JVM_OPTIONS, "-cp", classpath()]
        cmd += ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
        cmd += ["-Dzookeeper.electionPortBindRetry=0"]
        cmd += ["org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self._config())]
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        self.paused = False

    def mode(self) -> str | None:
        """``"leader"`` or ``"follower"`` while the node serves in a quorum, else None."""
        if not self.running or self.paused:
            return None

        def ask() -> str:
            return four_letter_word(self.host.address, "srvr")

        try:
            answer = call_in_namespace(self.host.namespace, ask)
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of its log."""
        with contextlib.suppress(FileNotFoundError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM and wait (SIGKILL after ``timeout``)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.paused = False

    def pause(self) -> None:
        """Freeze the node (SIGSTOP)."""
        if self.proc is not None and self.proc.poll() is None:
            freeze(self.proc)
            self.paused = True

    def resume(self) -> None:
        """Let a paused node run again (SIGCONT)."""
        if self.paused and self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False


def wait_for_quorum(nodes: Sequence[ZooKeeperNode], timeout: float) -> ZooKeeperNode:
    """Wait until a leader serves with a quorum of followers; the leader.

    Raises:
        ZooKeeperError: no quorum within ``timeout`` (the message holds the nodes' logs).
    """
    needed = len(nodes) // 2 + 1
    deadline = time.monotonic() + timeout
    while True:
        modes = {node.myid: node.mode() for node in nodes}
        serving = [m for m in modes.values() if m in ("leader", "follower")]
        leaders = [node for node in nodes if modes[node.myid] == "leader"]
        if len(serving) >= needed and leaders:
            return leaders[0]
        if time.monotonic() > deadline:
            logs = "\n".join(f"-- zk{n.myid} ({n.address}):\n{n.log_tail()}" for n in nodes)
            raise ZooKeeperError(
                f"no ZooKeeper quorum within {timeout:g}s (modes {modes}); logs:\n{logs}"
            )
        time.sleep(0.1)  # polling external processes: there is no event to await


class ZooKeeperEnsemble:
    """The members of an ensemble, and what a test does to them as a whole.

    Args:
        nodes: every member, in id order.
        start_timeout: seconds a quorum may take to form.
    """

    def __init__(self, nodes: Sequence[ZooKeeperNode], start_timeout: float) -> None:
        self.nodes = list(nodes)
        self._start_timeout = start_timeout

    def node(self, myid: int) -> ZooKeeperNode:
        """Member ``myid`` (from 1)."""
        return self.nodes[myid - 1]

    def leader(self, timeout: float = 30.0) -> ZooKeeperNode:
        """The current leader (waits for a quorum of the running members to serve)."""
        return wait_for_quorum([n for n in self.nodes if n.running], timeout)

    def kill_leader(self) -> int:
        """SIGKILL the current leader; its id."""
        leader = self.leader()
        leader.kill()
        return leader.myid

    def kill_quorum(self) -> list[int]:
        """SIGKILL a majority, the leader among them (no quorum is left); their ids."""
        leader = self.leader()
        others = [n for n in self.nodes if n is not leader and n.running]
        victims = [leader, *others][: len(self.nodes) // 2 + 1]
        for node in victims:
            node.kill()
        return [n.myid for n in victims]

    def start(self, *myids: int, wait: bool = True) -> None:
        """Start stopped members (all of them without ids); then wait for a quorum."""
        for node in self.nodes:
            if (not myids or node.myid in myids) and not node.running:
                node.start()
        if wait:
            self.leader(self._start_timeout)

    def kill_all(self) -> None:
        """SIGKILL every member (teardown)."""
        for node in self.nodes:
            node.kill()


__all__ = [
    "CLIENT_PORT",
    "JVM_OPTIONS",
    "ZooKeeperEnsemble",
    "ZooKeeperError",
    "ZooKeeperNode",
    "classpath",
    "four_letter_word",
    "wait_for_quorum",
]

"""Real kvstore processes (examples/kvstore) for the history tests: each node reaches
ZooKeeper through a proxy of its own that can partition it, and records every record it
applies in a history file; a writer sends unique commands to whichever node leads."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

from tests.processes import DIE_WITH_PARENT
from walog.log.position import Position
from walog.testing import free_port

REPO_ROOT = Path(__file__).resolve().parents[3]
SERVER = REPO_ROOT / "examples" / "kvstore" / "server.py"
REQUEST_TIMEOUT_S = 3.0
LOG_TAIL_LINES = 40


class PartitionProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; :meth:`partition` stops every byte in
    both directions (connections stay open, as when packets are dropped) until :meth:`heal`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="partition-proxy").start()

    def partition(self) -> None:
        """Stop forwarding."""
        self._open.clear()

    def heal(self) -> None:
        """Forward again."""
        self._open.set()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, server}
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                self._open.wait()  # partitioned: the bytes go nowhere until healed
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closed = True
        self._open.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()


class NodeExited(Exception):
    """A node's process ended on its own: its exit code and the end of its log."""

    def __init__(self, node: KVProcess, code: int) -> None:
        lines = node.history.with_suffix(".log").read_text(errors="replace").splitlines()
        tail = "\n".join(lines[-LOG_TAIL_LINES:])
        super().__init__(f"node {node.node_id} exited with {code}; its log ends:\n{tail}")


class KVProcess:
    """One kvstore node process; restartable with the same history file."""

    def __init__(self, zk_uri: str, log: str, node_id: str, history: Path, **flags: int) -> None:
        # zk://HOST:PORT/CHROOT?...: the node reaches ZooKeeper through its own proxy.
        rest = zk_uri.removeprefix("zk://")
        hostport, _, chroot = rest.partition("/")
        host, port = hostport.split(",")[0].rsplit(":", 1)
        self.proxy = PartitionProxy((host, int(port)))
        chroot = chroot.partition("?")[0]
        self.uri = f"zk://127.0.0.1:{self.proxy.port}/{chroot}?session_timeout=2"
        self.log, self.node_id, self.history = log, node_id, history
        self.flags = flags
        self.port = free_port()
        self.proc: subprocess.Popen[str] | None = None
        self._killed = False  # by the test: an exit then is no failure
        self.start()

    def start(self) -> None:
        """Start the process (again) and wait until it serves."""
        args = [*DIE_WITH_PARENT, sys.executable, str(SERVER)]  # none left by a killed run
        args += ["--metadata", self.uri, "--log", self.log]
        args += ["--listen", f"127.0.0.1:{self.port}", "--node", self.node_id]
        args += ["--history", str(self.history)]
        for name, value in self.flags.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        # The node's log lines, beside its history, for a failure's post-mortem.
        with self.history.with_suffix(".log").open("a") as stderr:
            self.proc = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                text=True,
            )
        # Only now: until the new process replaces it, the killed one's exit is no failure
        # (the writer thread polling the nodes' roles must not take it for one).
        self._killed = False
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if '"standby"' in line:
                break
        else:
            raise AssertionError(f"node {self.node_id} exited ({self.proc.wait()}) at start")
        # Nobody reads the role events from here on: drain them so the pipe never fills.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def request(self, line: str, timeout: float = REQUEST_TIMEOUT_S) -> str:
        """One request; raises OSError when the node does not answer in time, and
        :class:`NodeExited` (not retried by callers) when its process has ended."""
        if self.proc is not None and not self._killed and (code := self.proc.poll()) is not None:
            raise NodeExited(self, code)
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(line.encode() + b"\n")
            reply = sock.makefile().readline().strip()
        if not reply:
            raise ConnectionError(f"node {self.node_id} closed the connection")
        return reply

    def role(self) -> str | None:
        """LEADER, STANDBY, or None when it does not answer."""
        try:
            return self.request("ROLE", timeout=1.0)
        except OSError:
            return None

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the process."""
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL and reap."""
        self._killed = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()

    def close(self) -> None:
        """Kill the process and stop its proxy."""
        with contextlib.suppress(ProcessLookupError):
            self.signal(signal.SIGCONT)
        self.kill()
        self.proxy.close()


@dataclasses.dataclass
class Acked:
    """Acknowledged commands: key -> the position the leader answered."""

    positions: dict[str, Position] = dataclasses.field(default_factory=dict)
    changed: threading.Condition = dataclasses.field(default_factory=threading.Condition)

    def add(self, key: str, position: Position) -> None:
        with self.changed:
            self.positions[key] = position
            self.changed.notify_all()

    def count(self) -> int:
        with self.changed:
            return len(self.positions)


class Writer:
    """A thread sending ``PUT k<i> v<i>`` (each key once, never retried) to the leader."""

    def __init__(self, nodes: list[KVProcess]) -> None:
        self.nodes = nodes
        self.acked = Acked()
        self.unknown = 0  # commands whose outcome the writer never learnt
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kv-writer")
        self._thread.start()

    def _leader(self) -> KVProcess | None:
        for node in self.nodes:
            if node.role() == "LEADER":
                return node
        return None

    def _run(self) -> None:
        try:
            self._write()
        finally:
            with self.acked.changed:
                self.acked.changed.notify_all()  # a waiter learns the writer is gone

    def _write(self) -> None:
        i = 0
        while not self._stop.is_set():
            leader = self._leader()
            if leader is None:
                self._stop.wait(0.05)  # nobody leads yet: ask again shortly
                continue
            while not self._stop.is_set():
                key = f"k{i}"
                i += 1
                try:
                    reply = leader.request(f"PUT {key} v{i}")
                except OSError:
                    self.unknown += 1
                    break
                if not reply.startswith("OK "):
                    if "not the leader" not in reply:
                        self.unknown += 1
                    break
                self.acked.add(key, Position.parse(reply.split()[1]))

    def wait_more(self, count: int, timeout: float = 60.0) -> None:
        """Block until ``count`` more commands are acknowledged."""
        acked = self.acked
        with acked.changed:
            target = len(acked.positions) + count
            reached = acked.changed.wait_for(
                lambda: len(acked.positions) >= target or not self._thread.is_alive(), timeout
            )
            assert self._thread.is_alive(), "the writer died"
            assert reached, f"only {len(acked.positions)} of {target} acked"

    def stop(self) -> Acked:
        """Stop writing; return what was acknowledged."""
        self._stop.set()
        self._thread.join(30)
        return self.acked

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

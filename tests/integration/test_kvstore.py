"""The kvstore example: a warm standby takes over from a killed leader, losing no
acknowledged write, and a paused (zombie) leader is fenced when it wakes up."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import DIE_WITH_PARENT
from walog.testing import LocalCluster, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER = REPO_ROOT / "examples" / "kvstore" / "server.py"


class Node:
    """One kvstore process and its stdout events."""

    def __init__(self, uri: str, log: str, node_id: str) -> None:
        self.address = ("127.0.0.1", free_port())
        self.proc = subprocess.Popen(
            [
                *DIE_WITH_PARENT,  # a killed test run leaves no node behind
                sys.executable,
                str(SERVER),
                "--metadata",
                uri,
                "--log",
                log,
                "--listen",
                f"127.0.0.1:{self.address[1]}",
                "--node",
                node_id,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            text=True,
        )
        self._lines: Iterator[str] = iter(self.proc.stdout)  # type: ignore[arg-type]

    def wait_event(self, event: str) -> dict[str, Any]:
        """Block until the node announces ``event`` (the test's timeout bounds it)."""
        for line in self._lines:
            if not line.startswith("{"):
                continue
            doc = json.loads(line)
            if doc["event"] == event:
                return doc  # type: ignore[no-any-return]
        raise AssertionError(f"node exited ({self.proc.wait()}) before announcing {event}")

    def connect(self) -> tuple[socket.socket, Any]:
        sock = socket.create_connection(self.address, timeout=60)
        return sock, sock.makefile("rw")

    def request(self, line: str) -> str:
        sock, f = self.connect()
        with sock, f:
            f.write(line + "\n")
            f.flush()
            return str(f.readline().strip())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def uri(cluster: LocalCluster) -> str:
    # Short sessions, so a dead leader's election record expires in about a second.
    return f"{cluster.metadata_uri}?session_timeout=1.5&heartbeat=0.3"


def test_standby_takes_over_from_a_killed_leader_without_losing_acked_writes(
    uri: str, log_name: str
) -> None:
    nodes: list[Node] = []
    try:
        leader = Node(uri, log_name, "a")
        nodes.append(leader)
        leader.wait_event("leader")  # before the standby starts: it must not win the election
        standby = Node(uri, log_name, "b")
        nodes.append(standby)
        standby.wait_event("standby")
        acked: dict[str, str] = {}
        first_acks = threading.Event()
        stop = threading.Event()

        def writer() -> None:
            with contextlib.suppress(ConnectionError):
                write_until_failure()

        def write_until_failure() -> None:
            sock, f = leader.connect()
            with sock, f:
                for i in range(100_000):
                    if stop.is_set():
                        return
                    f.write(f"PUT k{i} v{i}\n")
                    f.flush()
                    reply = f.readline().strip()
                    if not reply.startswith("OK"):
                        return  # the leader died mid-request: that write was never acked
                    acked[f"k{i}"] = f"v{i}"
                    if len(acked) >= 50:
                        first_acks.set()

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        assert first_acks.wait(60), "the leader acknowledged too few writes"
        os.kill(leader.proc.pid, signal.SIGKILL)  # mid-stream, no goodbye
        thread.join(60)
        stop.set()
        standby.wait_event("leader")
        assert standby.request("ROLE") == "LEADER"
        lost = [k for k, v in acked.items() if standby.request(f"GET {k}") != f"VALUE {v}"]
        assert not lost, f"acknowledged writes lost in the takeover: {lost[:10]}"
        assert standby.request("PUT after takeover").startswith("OK")
        assert standby.request("GET after") == "VALUE takeover"
    finally:
        for node in nodes:
            node.stop()


def test_a_paused_leader_is_fenced_when_it_wakes(zk_cluster: LocalCluster, log_name: str) -> None:
    # On ZooKeeper: a frozen process holds no lock there, while with SQLite the leader may
    # be frozen mid-heartbeat holding the single writer lock (docs/operations.md).
    uri = zk_cluster.metadata_uri
    nodes: list[Node] = []
    try:
        zombie = Node(uri, log_name, "a")
        nodes.append(zombie)
        zombie.wait_event("leader")
        standby = Node(uri, log_name, "b")
        nodes.append(standby)
        standby.wait_event("standby")
        assert zombie.request("PUT before pause").startswith("OK")
        sock, f = zombie.connect()  # connected before the pause
        with sock, f:
            os.kill(zombie.proc.pid, signal.SIGSTOP)
            standby.wait_event("leader")
            os.kill(zombie.proc.pid, signal.SIGCONT)
            f.write("PUT late write\n")
            f.flush()
            reply = f.readline().strip()
        assert not reply.startswith("OK"), f"a deposed leader acknowledged a write: {reply}"
        assert standby.request("GET before") == "VALUE pause"
        assert standby.request("GET late") == "NONE"
    finally:
        for node in nodes:
            node.stop()

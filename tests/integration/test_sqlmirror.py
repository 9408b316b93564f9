"""The sqlmirror example: a replicated SQLite database on the sync state machine; a
standby answers queries, takes over from a killed leader with every acknowledged statement
applied, and a failing statement fails on every node without changing anything."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from tests.processes import DIE_WITH_PARENT
from walog.testing import LocalCluster, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE = REPO_ROOT / "examples" / "sqlmirror" / "node.py"


class MirrorNode:
    """One sqlmirror process."""

    def __init__(self, uri: str, log: str, node_id: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                *DIE_WITH_PARENT,  # a killed test run leaves no node behind
                *(sys.executable, str(NODE), "--metadata", uri, "--log", log),
                *("--listen", f"127.0.0.1:{self.port}", "--node", node_id),
                *("--snapshot-every", "5"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"node {node_id} exited ({self.proc.wait()}) before serving"

    def ask(self, **request: Any) -> Any:
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as sock:
            f = sock.makefile("rw")
            f.write(json.dumps(request) + "\n")
            f.flush()
            return json.loads(f.readline())

    def wait_role(self, role: str) -> None:
        for attempt in Retrying(
            stop=stop_after_delay(60),
            wait=wait_fixed(0.1),
            retry=retry_if_exception_type(AssertionError),
            reraise=True,
        ):
            with attempt:
                assert self.ask(role=True)["role"] == role

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def uri(cluster: LocalCluster) -> str:
    # Short sessions, so a dead leader's election record expires in about a second.
    return f"{cluster.metadata_uri}?session_timeout=1.5&heartbeat=0.3"


def test_a_standby_mirror_takes_over_with_every_acknowledged_statement(
    uri: str, log_name: str
) -> None:
    a = MirrorNode(uri, log_name, "a")
    nodes = [a]
    try:
        a.wait_role("leader")
        b = MirrorNode(uri, log_name, "b")
        nodes.append(b)
        assert a.ask(execute="CREATE TABLE books (isbn TEXT PRIMARY KEY, title TEXT)")["ok"]
        for i in range(12):
            reply = a.ask(execute="INSERT INTO books VALUES (?, ?)", params=[f"i{i}", f"t{i}"])
            assert reply["ok"] and reply["rowcount"] == 1, reply
        duplicate = a.ask(execute="INSERT INTO books VALUES (?, ?)", params=["i0", "again"])
        assert not duplicate["ok"] and "IntegrityError" in duplicate["error"]
        assert b.ask(execute="DELETE FROM books") == {"ok": False, "error": "not the leader"}
        count = "SELECT count(*) FROM books"
        for attempt in Retrying(stop=stop_after_delay(30), wait=wait_fixed(0.05), reraise=True):
            with attempt:
                assert b.ask(query=count)["rows"] == [[12]]
        a.kill()
        b.wait_role("leader")
        assert b.ask(query="SELECT title FROM books WHERE isbn = 'i0'")["rows"] == [["t0"]]
        assert b.ask(execute="DELETE FROM books WHERE isbn = ?", params=["i1"])["rowcount"] == 1
        # A node from scratch restores a snapshot and replays the rest.
        c = MirrorNode(uri, log_name, "c")
        nodes.append(c)
        for attempt in Retrying(stop=stop_after_delay(30), wait=wait_fixed(0.05), reraise=True):
            with attempt:
                assert c.ask(query=count)["rows"] == [[11]]
        assert c.ask(query="DELETE FROM books")["ok"] is False  # queries are read-only
    finally:
        for node in nodes:
            node.kill()

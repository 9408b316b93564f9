"""Linearizable reads with real processes: three kvstore nodes (examples/kvstore) over
ZooKeeper and real bookies, one key written through the leader and read with ``LGET`` on
every node while the leader is killed, paused (SIGSTOP) and cut off from ZooKeeper; the
history of writes and reads is linearizable (tests/linearizability.py)."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

from tests.integration.recipes.kvcluster import KVProcess
from tests.linearizability import Op, check
from walog.testing import LocalCluster

READERS = 2
FAULT_GAP_S = 2.0


class Register:
    """The writer and readers of key ``r``, recording every operation."""

    def __init__(self, nodes: list[KVProcess]) -> None:
        self.nodes = nodes
        self.ops: list[Op] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, daemon=True)]
        self.threads += [
            threading.Thread(target=self._read, args=(f"r{i}",), daemon=True)
            for i in range(READERS)
        ]
        for thread in self.threads:
            thread.start()

    def leader(self) -> KVProcess | None:
        for node in self.nodes:
            if node.role() == "LEADER":
                return node
        return None

    def _write(self) -> None:
        i = 0
        while not self.stop.is_set():
            leader = self.leader()
            if leader is None:
                self.stop.wait(0.05)
                continue
            value = f"v{i}"
            i += 1
            invoked = time.monotonic()
            try:
                reply = leader.request(f"PUT r {value}")
            except OSError:
                reply = "ERR no answer"
            if reply.startswith("OK "):
                self.ops.append(Op("write", value, invoked, time.monotonic(), leader.node_id))
            elif "not the leader" not in reply:  # may or may not be applied
                self.ops.append(Op("write", value, invoked, None, leader.node_id))

    def _read(self, who: str) -> None:
        rng = random.Random(who)
        while not self.stop.is_set():
            node = rng.choice(self.nodes)
            invoked = time.monotonic()
            try:
                reply = node.request("LGET r", timeout=35.0)
            except OSError:
                continue
            if reply == "NONE":
                value = None
            elif reply.startswith("VALUE "):
                value = reply.removeprefix("VALUE ")
            else:
                continue  # no answer: the read observed nothing
            self.ops.append(Op("read", value, invoked, time.monotonic(), f"{who}@{node.node_id}"))

    def finish(self) -> list[Op]:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        return list(self.ops)


def test_linearizable_reads_on_every_node_while_the_leader_fails(
    zk_cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri = zk_cluster.metadata_uri
    nodes = [
        KVProcess(uri, log_name, node, tmp_path / f"{node}.history", roll_every=5)
        for node in ("a", "b", "c")
    ]
    register = Register(nodes)
    try:
        for fault in ("kill", "pause", "partition"):
            time.sleep(FAULT_GAP_S)
            leader = register.leader()
            assert leader is not None, "nobody leads"
            if fault == "kill":
                leader.kill()
                time.sleep(FAULT_GAP_S)
                leader.start()
            elif fault == "pause":
                leader.signal(signal.SIGSTOP)
                time.sleep(3.0)  # past its session's end: another node takes over
                leader.signal(signal.SIGCONT)
            else:
                leader.proxy.partition()
                time.sleep(3.0)
                leader.proxy.heal()
        time.sleep(FAULT_GAP_S)
    finally:
        ops = register.finish()
        for node in nodes:
            node.close()
    reads = [op for op in ops if op.kind == "read"]
    writes = [op for op in ops if op.kind == "write" and op.response is not None]
    assert len(reads) >= 20 and len(writes) >= 20, (len(reads), len(writes))
    verdict = check(ops)
    assert verdict is None, verdict

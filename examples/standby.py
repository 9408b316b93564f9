"""A warm standby for a plain log: kill the leader with SIGKILL, watch the standby take over.

Run it with nothing else (it starts a local cluster of 3 bookies on SQLite in a temporary
directory) or against a cluster of yours::

    python examples/standby.py
    python examples/standby.py --metadata zk://127.0.0.1:2181/walog

Two node processes run ``node``: each campaigns in the log's election (``Log.elect``); the
winner takes the log over (``open_writer`` fences whoever wrote before) and appends a
record every 20 ms; the other tails the log and reports its lag (``LogReader.lag()``).
The script waits until the standby has caught up, kills the leader with SIGKILL, and
prints how long it took until the standby led and its first record was durable: about the
metadata store's session timeout, after which the dead leader's election record expires.
Every record the dead leader had acknowledged is then checked to be in the log.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import walog

LOG = "standby-demo"
SESSION_TIMEOUT_S = 2.0
"""The SQLite store's session timeout here: a dead leader's record expires after it."""


def node(metadata: str, name: str) -> None:
    """One node: a standby that tails the log until it wins the election, then the leader.

    Prints one line per event on stdout (``standby``, ``caught-up``, ``leader``,
    ``acked POSITION``), flushed, for the script that drives it.
    """

    def say(*words: object) -> None:
        print(*words, flush=True)

    with walog.connect(metadata) as client:
        log = client.open_log(LOG)
        reader = log.open_reader("earliest")
        stop = threading.Event()

        def follow() -> None:
            # The standby's work: apply what the leader writes (here: just read it).
            announced = False
            while not stop.is_set():
                reader.read_next(timeout=0.1)
                if not announced and reader.lag().caught_up:
                    say("caught-up")
                    announced = True

        say("standby")
        tail = threading.Thread(target=follow, daemon=True)
        tail.start()
        term = log.elect(name)
        stop.set()
        tail.join()
        with log.open_writer() as writer:  # fences the previous leader's writer
            while not reader.lag().caught_up:  # what it acknowledged before it died
                reader.read_next(timeout=0.1)
            reader.close()
            say("leader", term.epoch)
            while term.is_leader:
                say("acked", writer.append(f"{name} {time.time()}".encode()))
                time.sleep(0.02)


class Node:
    """A node process and the lines it printed."""

    def __init__(self, metadata: str, name: str) -> None:
        self.name = name
        self.lines: queue.Queue[str] = queue.Queue()
        self.acked: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, __file__, "node", "--metadata", metadata, "--name", name],
            stdout=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def wait_for(self, word: str, timeout: float = 60.0) -> str:
        """The first line starting with ``word`` (keeping the acked positions seen)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(
                    f"node {self.name} did not print {word!r} within {timeout} s"
                ) from None
            if line.startswith("acked "):
                self.acked.append(line.split()[1])
            if line.startswith(word):
                return line

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        self.process.wait(timeout=30)


@contextlib.contextmanager
def cluster(metadata: str | None) -> Iterator[str]:
    """The metadata URI of the cluster to use: ``metadata``, or a local one started here."""
    if metadata is not None:
        yield metadata
        return
    from walog.testing import LocalCluster

    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{Path(tmp) / 'meta.db'}?session_timeout={SESSION_TIMEOUT_S}"
        with LocalCluster(bookies=3, metadata=uri, data_dir=Path(tmp)):
            yield uri


def main() -> int:
    """Run the demonstration; 0 when the standby took over with every acked record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("role", nargs="?", choices=["node"], help=argparse.SUPPRESS)
    parser.add_argument("--metadata", help="a cluster's metadata URI (default: start one)")
    parser.add_argument("--name", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "node":
        node(args.metadata, args.name)
        return 0
    with cluster(args.metadata) as metadata:
        leader = Node(metadata, "a")
        leader.wait_for("leader")
        leader.wait_for("acked")
        standby = Node(metadata, "b")
        try:
            standby.wait_for("caught-up")
            leader.wait_for("acked")
            os.kill(leader.process.pid, signal.SIGKILL)
            killed = time.monotonic()
            leader.process.wait()
            with contextlib.suppress(SystemExit):  # lines it printed before it died
                while True:
                    leader.wait_for("acked", timeout=0.5)
            standby.wait_for("leader")
            led = time.monotonic()
            standby.wait_for("acked")
            written = time.monotonic()
            print(
                f"leader killed with SIGKILL; the standby led after {led - killed:.2f} s and "
                f"its first record was durable after {written - killed:.2f} s"
            )
        finally:
            standby.stop()
            with contextlib.suppress(ProcessLookupError):
                leader.process.kill()
        with walog.connect(metadata) as client:
            reader = client.open_log(LOG).open_reader("earliest")
            present = set()
            while (record := reader.read_next(timeout=1.0)) is not None:
                present.add(str(record.position))
            reader.close()
        lost = [p for p in leader.acked if p not in present]
        print(f"{len(leader.acked)} records acknowledged to the dead leader, {len(lost)} lost")
        return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())

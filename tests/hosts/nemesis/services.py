"""The processes of a mixed run, on their client hosts, kept running through the faults.

- ``c1``, ``c2``: the log's writer processes (:class:`tests.hosts.history.HostWriter`);
  one writes at a time, a new one takes the log over now and then (:meth:`takeover`), and
  one that ended (fenced, or given up under a fault) is replaced by a new one;
- ``c3``, ``c4``: two nodes of the replicated key-value service (examples/kvstore on the
  state-machine recipe), each with its history file; a node that exits starts again;
- ``c5``: ``walog autorecovery`` (``--verify-entries``), ``walog maintain`` (the log's
  retention) and, once, ``walog bookie decommission``;
- ``c6``: the tailing reader (:mod:`tests.hosts.nemesis.tail`, a subscription retention
  respects) and the key-value client (:mod:`tests.hosts.nemesis.kvclient`).

Every process is started from the main thread (its parent-death signal follows that
thread) and lives in a host's network namespace, so closing the HostCluster, or the next
HostCluster's sweep after a SIGKILL, ends it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from tests.hosts.history import HostWriter
from walog.testing.hosts import HostCluster

REPO_ROOT = Path(__file__).resolve().parents[3]
KV_SERVER = REPO_ROOT / "examples" / "kvstore" / "server.py"
KV_PORT = 7000
KV_LOG = "kv"
TAIL_SUBSCRIPTION = "nemesis-tail"
WRITER_HOSTS = ("c1", "c2")
KV_HOSTS = {"a": "c3", "b": "c4"}
SERVICE_HOST, OBSERVER_HOST = "c5", "c6"
CLIENT_HOSTS = 6
RESTART_PAUSE_S = 1.0
"""Seconds between a process's exit and its replacement (a fault is usually still on)."""


class Services:
    """The processes of one run, started, watched and replaced.

    Args:
        cluster: the started HostCluster (with ``CLIENT_HOSTS`` client hosts).
        work: where histories and process output go.
        log: the log the writers write (created already, with its settings stored).
        writer_session_s: ZooKeeper session timeout of the writers, seconds.
        rate: records a second each writer appends at most.
        roll_entries: the log's roll policy (as stored), passed on to the writers.
        kv_session_s: ZooKeeper session timeout of the key-value nodes, seconds.
        lost_after_s: autorecovery's ``--lost-after``.
    """

    def __init__(
        self,
        cluster: HostCluster,
        work: Path,
        log: str,
        *,
        writer_session_s: float,
        rate: float,
        roll_entries: int,
        kv_session_s: float,
        lost_after_s: float,
    ) -> None:
        self.cluster = cluster
        self.work = work
        self.log = log
        self.logs_dir = work / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.writers: list[HostWriter] = []
        self._writer_args = {"session_timeout": writer_session_s, "rate": rate,
                             "roll_entries": roll_entries}  # fmt: skip
        self._kv_uri = cluster.uri(kv_session_s)
        self._lost_after_s = lost_after_s
        self.kv: dict[str, subprocess.Popen[bytes]] = {}
        self.kv_starts = 0
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.decommission_proc: subprocess.Popen[bytes] | None = None
        self.decommission_target = ""
        self.decommissioned = ""
        self.decommission_tries = 0
        self.unavailable: set[str] = set()
        """Client hosts cut off now (a new writer starts elsewhere)."""
        self.notes: list[str] = []
        self._ended_at = 0.0
        self._clients_stopped = False

    # -- starting ---------------------------------------------------------------------------

    def _popen(self, host: str, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self.logs_dir / f"{name}.log").open("ab") as out:
            return self.cluster.popen(host, argv, log=out)

    def start(self) -> None:
        """Start every process of the run."""
        uri = self.cluster.metadata_uri
        self.takeover()
        for node in KV_HOSTS:
            self._start_kv(node)
        self.daemons["autorecovery"] = self._popen(
            SERVICE_HOST, "autorecovery",
            ["python", "-m", "walog", "autorecovery", "--metadata", uri, "--interval", "1",
             "--lost-after", f"{self._lost_after_s:g}", "--verify-entries", "--json"],
        )  # fmt: skip
        self.daemons["maintain"] = self._popen(
            SERVICE_HOST, "maintain",
            ["python", "-m", "walog", "maintain", "--metadata", uri, "--interval-s", "3", "--json"],
        )  # fmt: skip
        self.daemons["tail"] = self._start_tail()
        nodes = [f"{self.cluster.host(h).address}:{KV_PORT}" for h in KV_HOSTS.values()]
        self.daemons["kvclient"] = self._popen(
            OBSERVER_HOST, "kvclient",
            ["python", "-m", "tests.hosts.nemesis.kvclient", str(self.work / "kv-acks.jsonl"),
             *nodes],
        )  # fmt: skip

    def _start_tail(self) -> subprocess.Popen[bytes]:
        return self._popen(
            OBSERVER_HOST, "tail",
            ["python", "-m", "tests.hosts.nemesis.tail", self.cluster.metadata_uri, self.log,
             TAIL_SUBSCRIPTION, str(self.work / "tail.jsonl")],
        )  # fmt: skip

    def _start_kv(self, node: str) -> None:
        host = KV_HOSTS[node]
        self.kv_starts += 1
        self.kv[node] = self._popen(
            host, f"kv-{node}",
            ["python", str(KV_SERVER), "--metadata", self._kv_uri, "--log", KV_LOG,
             "--listen", f"{self.cluster.host(host).address}:{KV_PORT}", "--node", node,
             "--history", str(self.kv_history(node)), "--snapshot-every", "100",
             "--roll-every", "50"],
        )  # fmt: skip

    def kv_history(self, node: str) -> Path:
        """The history file of key-value node ``node``."""
        return self.work / f"kv-{node}.history"

    # -- the log's writers ------------------------------------------------------------------

    def live_writers(self) -> list[HostWriter]:
        """Writer processes still running."""
        return [w for w in self.writers if w.proc.poll() is None]

    def writer_host(self) -> str | None:
        """The host of the newest writer still running."""
        live = self.live_writers()
        return live[-1].host if live else None

    def takeover(self) -> str:
        """Start a new writer process, on the other writer host when it can be reached: it
        takes the log over, fencing the one writing now."""
        if len(self.live_writers()) > 1:
            return "skipped: a takeover is under way"
        last = self.writer_host() or WRITER_HOSTS[-1]
        hosts = [h for h in WRITER_HOSTS if h != last] + [last]
        host = next((h for h in hosts if h not in self.unavailable), hosts[0])
        number = len(self.writers) + 1
        self.writers.append(
            HostWriter(
                self.cluster, host, self.log, self.work / "writers", incarnation=number,
                writer=number, **self._writer_args,  # type: ignore[arg-type]
            )
        )  # fmt: skip
        return f"writer {number} on {host}"

    # -- decommission -----------------------------------------------------------------------

    def decommission(self, bookie_id: str) -> str:
        """Start ``walog bookie decommission`` for the bookie (again, after a failure)."""
        self.decommission_target = bookie_id
        self.decommission_tries += 1
        self.decommission_proc = self._popen(
            SERVICE_HOST, "decommission",
            ["python", "-m", "walog", "bookie", "decommission", bookie_id, "--metadata",
             self.cluster.metadata_uri, "--wait", "60"],
        )  # fmt: skip
        return f"decommissioning {bookie_id} (try {self.decommission_tries})"

    def decommission_pending(self) -> bool:
        """True while a decommission is asked for and not done."""
        return bool(self.decommission_target) and not self.decommissioned

    def _tend_decommission(self) -> None:
        proc = self.decommission_proc
        if proc is None or proc.poll() is None:
            return
        self.decommission_proc = None
        if proc.returncode == 0:
            self.decommissioned = self.decommission_target
            bookie = self.cluster.bookie(self.decommissioned)
            if bookie.paused:
                bookie.resume()
            if bookie.running:
                bookie.signal(signal.SIGTERM)  # drained: it stops for good
            self.notes.append(f"decommissioned {self.decommissioned}")
        else:
            self.notes.append(f"decommission exited with {proc.returncode}; again")
            self.decommission(self.decommission_target)

    # -- watching -----------------------------------------------------------------------------

    def tend(self) -> None:
        """Replace what ended: a writer (when none runs), a key-value node, the tailing
        reader; carry a decommission on. A daemon that ended is a failure, noted. Once the
        clients are stopped only the decommission is carried on: a writer started then
        would write past the end the checks read to."""
        self._tend_decommission()
        if self._clients_stopped:
            return
        now = time.monotonic()
        if not self.live_writers():
            if self._ended_at == 0.0:
                self._ended_at = now
            elif now - self._ended_at >= RESTART_PAUSE_S:
                self._ended_at = 0.0
                self.takeover()
        for node, proc in self.kv.items():
            if proc.poll() is not None:
                self.notes.append(f"kv node {node} exited with {proc.returncode}; started again")
                self._start_kv(node)
        tail = self.daemons["tail"]
        if tail.poll() is not None:
            self.notes.append(f"tail reader exited with {tail.returncode}; started again")
            self.daemons["tail"] = self._start_tail()

    def daemon_failures(self) -> list[str]:
        """Daemons (autorecovery, maintain, key-value client) that exited on their own."""
        return [
            f"{name} exited with {proc.returncode}: see {self.logs_dir / name}.log"
            for name, proc in self.daemons.items()
            if name != "tail" and proc.poll() is not None
        ]

    def stop(self, name: str) -> None:
        """SIGTERM a daemon and wait for it."""
        _terminate([self.daemons[name]])

    def stop_clients(self) -> None:
        """Stop the writers (each closes its ledger), the key-value client (it first waits
        for the nodes to agree), then the nodes, the tailing reader and maintain; none is
        replaced afterwards."""
        self._clients_stopped = True
        _terminate(
            [w.proc for w in self.writers]
            + [self.daemons[n] for n in ("kvclient", "tail", "maintain")]
        )
        _terminate(list(self.kv.values()))


def _terminate(procs: list[subprocess.Popen[bytes]], timeout: float = 90.0) -> None:
    """SIGTERM each process, then wait for all (SIGKILL one still there after
    ``timeout``)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

"""One chaos run: real ZooKeeper, real bookie processes, writer processes, a nemesis, a check.

:func:`run_chaos` starts a :class:`walog.testing.LocalCluster` on a ZooKeeper chroot, starts
the writer processes (:mod:`tests.chaos.worker`), carries out the seeded fault schedule of
:mod:`tests.chaos.nemesis`, heals everything, takes the log over once more (so every ledger
has a fixed end), reads it with two fresh reader processes (:mod:`tests.chaos.reader`) and
checks the history (:mod:`tests.chaos.checker`). The result names the seed and the schedule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

import walog
from tests.chaos import nemesis
from tests.chaos.checker import Ack, History, ReadRecord, Violation, check
from tests.chaos.records import RecordKey, read_json_lines
from tests.chaos.worker import CHAOS_CLIENT, CHAOS_ROLL, MUTATIONS_ENV
from tests.processes import DIE_WITH_PARENT
from walog.errors import is_retriable
from walog.log.position import Position
from walog.testing import LocalCluster, ZooKeeperServer
from walog.wire.durability import Durability

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class ChaosConfig:
    """What one run does.

    Attributes:
        seed: decides the fault schedule and the writers' random choices.
        seconds: length of the fault phase.
        bookies: bookie processes; writers: writer processes.
        ensemble_size, write_quorum, ack_quorum: the log's ledgers.
        session_timeout: ZooKeeper session timeout of bookies and writers, seconds.
        max_faulty_bookies: bookies faulty at once at most.
    """

    seed: int
    seconds: float = 40.0
    bookies: int = 5
    writers: int = 3
    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    session_timeout: float = 4.0
    max_faulty_bookies: int = 2
    durability: str = "PERSISTENT"
    """The log's durability (``walog.Durability`` name): a VOLATILE log's bookies
    acknowledge from their page cache, which a killed process leaves to the system, so the
    same rules hold."""
    mutations: tuple[str, ...] = ()
    """Test-only protocol mutations (walog.mutations) switched on in the writers, to
    show that the checker catches the bug each one plants."""

    def schedule(self) -> list[nemesis.Fault]:
        """The run's fault schedule."""
        return nemesis.make_schedule(
            self.seed,
            self.seconds,
            bookies=self.bookies,
            writers=self.writers,
            session_timeout=self.session_timeout,
            max_faulty_bookies=self.max_faulty_bookies,
        )


@dataclasses.dataclass
class ChaosResult:
    """What a run found."""

    config: ChaosConfig
    schedule: list[nemesis.Fault]
    violations: list[Violation]
    acks: int = 0
    records_read: int = 0
    ledgers: int = 0
    writer_starts: int = 0
    tail_read: int = 0
    tail_errors: int = 0
    nemesis_log: list[str] = dataclasses.field(default_factory=list)
    work_dir: Path | None = None

    @property
    def ok(self) -> bool:
        """True when no rule was broken."""
        return not self.violations

    def summary(self) -> str:
        """One line of counts."""
        return (
            f"seed={self.config.seed} seconds={self.config.seconds:g} faults={len(self.schedule)} "
            f"acks={self.acks} read={self.records_read} ledgers={self.ledgers} "
            f"writer_starts={self.writer_starts} tail={self.tail_read}/{self.tail_errors}err "
            f"violations={len(self.violations)}"
        )

    def report(self) -> str:
        """The summary, violations, the seed and the nemesis schedule as carried out."""
        lines = [self.summary(), f"work dir: {self.work_dir}"]
        lines += [f"VIOLATION {violation}" for violation in self.violations]
        mutation = "".join(f" --mutation {name}" for name in self.config.mutations)
        lines.append(
            f"replay: python -m tests.chaos --seconds {self.config.seconds:g} "
            f"--seed {self.config.seed} --quorum {self.config.ensemble_size},"
            f"{self.config.write_quorum},{self.config.ack_quorum}"
            f" --durability {self.config.durability}{mutation}"
        )
        lines.append("nemesis schedule:")
        lines.append(nemesis.format_schedule(self.schedule))
        lines.append("nemesis log:")
        lines += self.nemesis_log
        return "\n".join(lines)


class WriterPool:
    """The writer processes; each start of one writer is a new incarnation."""

    def __init__(self, uri: str, log_name: str, out_dir: Path, config: ChaosConfig) -> None:
        self._uri = uri
        self._log = log_name
        self._out = out_dir
        self._config = config
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * config.writers
        self.incarnations = [0] * config.writers
        self.starts = 0
        self.crashes: list[str] = []
        self._logs: list[IO[bytes]] = []

    def start(self, writer: int) -> bool:
        """Start the writer's next incarnation; False when one still runs (at most one
        process per writer, or its sequence numbers would interleave)."""
        running = self.procs[writer]
        if running is not None and running.poll() is None:
            return False
        self.incarnations[writer] += 1
        self.starts += 1
        events = (self._out / f"events-{writer}.log").open("ab")
        self._logs.append(events)
        cmd = [
            *DIE_WITH_PARENT, sys.executable, "-m", "tests.chaos.worker", self._uri, self._log,
            str(writer), str(self.incarnations[writer]), str(self._out), str(self._config.seed),
            "--quorum", f"{self._config.ensemble_size},{self._config.write_quorum},"
            f"{self._config.ack_quorum}", "--durability", self._config.durability,
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        env[MUTATIONS_ENV] = ",".join(self._config.mutations)
        self.procs[writer] = subprocess.Popen(
            cmd, stdout=events, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT
        )
        return True

    def kill(self, writer: int) -> None:
        """SIGKILL the writer (noting it if it had already died on its own)."""
        proc = self.procs[writer]
        if proc is None:
            return
        code = proc.poll()
        if code is not None:
            self.crashes.append(f"writer {writer} exited with status {code} on its own")
        else:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        self.procs[writer] = None

    def kill_all(self) -> None:
        """SIGKILL every writer."""
        for writer in range(len(self.procs)):
            self.kill(writer)
        for file in self._logs:
            file.close()
        self._logs.clear()


class Nemesis:
    """Carries out a fault schedule on a cluster and a writer pool."""

    def __init__(self, cluster: LocalCluster, writers: WriterPool, zk: str, out: Path) -> None:
        self.cluster = cluster
        self.writers = writers
        self.zk = zk
        self.out = out
        self.log: list[str] = []

    def run(self, schedule: list[nemesis.Fault]) -> None:
        """Every step at its time (relative to now); heal-steps still pending run at once."""
        began = time.monotonic()
        for step in nemesis.timeline(schedule):
            delay = began + step.at - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the schedule is a timetable: waiting for the clock is the point
            try:
                what = self.act(step.fault, step.heal)
            except Exception as exc:  # a fault that could not be applied is logged, not fatal
                what = f"failed: {type(exc).__name__}: {exc}"
            stamp = time.monotonic() - began
            self.log.append(
                f"t={stamp:7.2f}s {'heal' if step.heal else 'inject'} {step.fault.kind}"
                f" #{step.fault.target}: {what}"
            )

    def act(self, fault: nemesis.Fault, heal: bool) -> str:
        """Inject (or undo, with ``heal``) one fault."""
        target = fault.target
        if fault.kind in ("kill_bookie", "stop_bookie"):
            if heal:
                self.cluster.restart(target, wait=False)
                return "restarted"
            if not self.cluster.is_running(target):
                return "already down"
            if self.cluster.is_paused(target):
                self.cluster.resume(target)
            if fault.kind == "kill_bookie":
                self.cluster.kill(target)
            else:
                self.cluster.stop(target)
            return "down"
        if fault.kind in ("pause_bookie", "expire_bookie"):
            if not self.cluster.is_running(target):
                return "not running"
            if heal:
                if self.cluster.is_paused(target):
                    self.cluster.resume(target)
                return "resumed"
            self.cluster.pause(target)
            return "paused"
        if fault.kind == "kill_writer":
            if heal:
                if not self.writers.start(target):
                    return "still running"
                return f"incarnation {self.writers.incarnations[target]} started"
            self.writers.kill(target)
            return "killed"
        if fault.kind == "expire_writer":
            return nemesis.expire_session(self.zk, self.out / f"session-{target}.json")
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def heal_all(self) -> None:
        """Every bookie running and ready again."""
        for index in range(len(self.cluster.bookie_ids)):
            if self.cluster.is_paused(index):
                self.cluster.resume(index)
            elif not self.cluster.is_running(index):
                self.cluster.restart(index, wait=False)
        for index in range(len(self.cluster.bookie_ids)):
            self.cluster.wait_ready(index, timeout=90.0)


def final_takeover(uri: str, log_name: str) -> Position | None:
    """Take the log over once more (fencing the last writer) and close; return the last
    entry of the log as a position with slot 0, or None for an empty log."""
    for attempt in Retrying(
        retry=retry_if_exception(is_retriable),
        stop=stop_after_delay(90.0),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        reraise=True,
    ):
        with attempt, walog.connect(uri, config=CHAOS_CLIENT) as client:
            log = client.open_log(log_name)
            log.open_writer().close()
            segments = log.segments()
    ends = [seg for seg in segments if seg.state == "CLOSED" and seg.last_entry_id >= 0]
    if not ends:
        return None
    return Position(ends[-1].ledger_id, ends[-1].last_entry_id, 0)


def start_tail_reader(uri: str, log_name: str, out: Path) -> subprocess.Popen[bytes]:
    """A reader process that follows the log during the faults (killed afterwards)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    cmd = [*DIE_WITH_PARENT, sys.executable, "-m", "tests.chaos.reader", "--tail", uri,
           log_name, "-", str(out / "tail.jsonl")]  # fmt: skip
    with (out / "tail.log").open("ab") as log:
        return subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)


def run_readers(uri: str, log_name: str, end: Position | None, out: Path) -> dict[str, Path]:
    """Two fresh reader processes in parallel; their output files."""
    end_arg = "-" if end is None else f"{end.ledger_id}:{end.entry_id}"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    procs = {}
    for name in ("reader-a", "reader-b"):
        path = out / f"{name}.jsonl"
        cmd = [*DIE_WITH_PARENT, sys.executable, "-m", "tests.chaos.reader", uri, log_name]
        cmd += [end_arg, str(path)]
        procs[name] = (path, subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stderr=subprocess.PIPE))
    results = {}
    for name, (path, proc) in procs.items():
        _, err = proc.communicate(timeout=400)
        if proc.returncode == 0:
            results[name] = path
        else:
            results[name] = path  # empty output: the checker reports the missing records
            (out / f"{name}.err").write_bytes(err)
    return results


def load_history(out: Path, writers: int, readers: dict[str, Path]) -> History:
    """Parse the writers' ack files and the readers' outputs."""
    acks: list[Ack] = []
    sent: dict[tuple[int, int], int] = {}
    for writer in range(writers):
        for row in read_json_lines(out / f"acks-{writer}.jsonl"):
            if "sent" in row:
                pair = row["sent"]
                assert isinstance(pair, list), f"bad sent row {row}"
                key = (writer, int(pair[0]))
                sent[key] = max(sent.get(key, -1), int(pair[1]))
            else:
                acks.append(Ack(RecordKey.parse(str(row["key"])), Position.parse(str(row["pos"]))))
    reads = {
        name: [
            ReadRecord(
                Position.parse(str(row["pos"])),
                RecordKey.parse(str(row["key"])),
                bool(row["intact"]),
            )
            for row in read_json_lines(path)
        ]
        for name, path in readers.items()
    }
    tail_rows = list(read_json_lines(out / "tail.jsonl"))
    tail = [
        ReadRecord(
            Position.parse(str(row["pos"])), RecordKey.parse(str(row["key"])), bool(row["intact"])
        )
        for row in tail_rows
        if "pos" in row
    ]
    return History(acks, reads, sent, tail=tail)


def run_chaos(config: ChaosConfig, work_dir: Path, zookeeper: ZooKeeperServer) -> ChaosResult:
    """Run the whole scenario once (see the module docstring) and check it.

    An exception in any phase (a cluster that does not heal, a final takeover that keeps
    failing) becomes a ``run_failed`` violation, so the report still names the seed and the
    schedule.
    """
    result = ChaosResult(config, config.schedule(), [], work_dir=work_dir)
    try:
        _run(config, work_dir, zookeeper, result)
    except Exception as exc:  # reported with the seed instead of a bare traceback
        detail = "".join(traceback.format_exception(exc)[-6:])
        result.violations.append(Violation("run_failed", f"{type(exc).__name__}: {detail}"))
    return result


def _run(
    config: ChaosConfig, work_dir: Path, zookeeper: ZooKeeperServer, result: ChaosResult
) -> None:
    schedule = result.schedule
    out = work_dir / "history"
    out.mkdir(parents=True, exist_ok=True)
    uri = zookeeper.uri(
        f"/chaos-{config.seed}-{uuid.uuid4().hex[:8]}", session_timeout=config.session_timeout
    )
    log_name = f"chaos-{config.seed}"
    with LocalCluster(config.bookies, metadata=uri, data_dir=work_dir / "cluster") as cluster:
        with walog.connect(uri) as client:  # create the log with the run's settings
            client.open_log(
                log_name,
                ensemble_size=config.ensemble_size,
                write_quorum=config.write_quorum,
                ack_quorum=config.ack_quorum,
                roll_policy=CHAOS_ROLL,
                durability=Durability[config.durability],
            )
        pool = WriterPool(uri, log_name, out, config)
        chaos = Nemesis(cluster, pool, zookeeper.connect_string, out)
        tail = start_tail_reader(uri, log_name, out)
        try:
            for writer in range(config.writers):
                pool.start(writer)
            chaos.run(schedule)
            chaos.heal_all()
        finally:
            pool.kill_all()
            tail.kill()
            tail.wait()
            result.nemesis_log = chaos.log
        result.writer_starts = pool.starts
        result.violations += [Violation("writer_crashed", crash) for crash in pool.crashes]
        end = final_takeover(uri, log_name)
        with walog.connect(uri) as client:
            result.ledgers = len(client.open_log(log_name).segments())
        readers = run_readers(uri, log_name, end, out)
    for name in readers:
        err = out / f"{name}.err"
        if err.exists():
            result.violations.append(
                Violation("reader_failed", f"{name}: {err.read_text(errors='replace')[-500:]}")
            )
    history = load_history(out, config.writers, readers)
    result.acks = len(history.acks)
    result.records_read = len(history.reads.get("reader-a", []))
    result.tail_read = len(history.tail or [])
    result.tail_errors = sum(1 for row in read_json_lines(out / "tail.jsonl") if "error" in row)
    result.violations += check(history)


@contextlib.contextmanager
def standalone_zookeeper() -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of its own, for runs outside pytest."""
    server = ZooKeeperServer().start()
    try:
        yield server
    finally:
        server.stop()

"""One mixed run: a HostCluster, its processes, the seeded nemesis, the heal, the checks.

:func:`run_mixed` builds the cluster (the disk bookie's data directory on a small tmpfs,
the EIO bookie with the failing-disk library), creates the log (E3/Qw3/Qa2, a roll every
``roll_entries`` entries, retention ``retention_s`` after a ledger closes, and the tailing
reader's subscription at its start), starts the processes (:mod:`services`), carries out
the schedule for ``seconds`` (:mod:`faults`), heals everything and then checks, in order:

1. writes go on after the heal (the writers and the key-value service get ``PROGRESS``
   more acknowledgements), and the decommission finishes;
2. the writers, the key-value client (which waits for every node to agree), the nodes,
   the tailing reader and ``walog maintain`` stop; both logs are taken over once more, so
   every ledger is closed;
3. autorecovery finishes: the survey (:mod:`survey`) finds every fragment on live bookies
   that hold its entries, the decommissioned bookie in none (waited for up to
   ``repair_s``);
4. a fresh reader on ``c6`` reads the log; the chaos checker holds the writers' acks, the
   epochs of their takeovers, the tailing reader's records and the survey against it; the
   key-value nodes' histories go through the recipe's history check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from tests.chaos.checker import History, Replication, Violation, check, check_replication
from tests.chaos.harness import load_history
from tests.chaos.records import read_json_lines
from tests.hosts.nemesis import schedule as plan
from tests.hosts.nemesis.faults import Nemesis
from tests.hosts.nemesis.services import (
    CLIENT_HOSTS,
    KV_HOSTS,
    KV_LOG,
    OBSERVER_HOST,
    TAIL_SUBSCRIPTION,
    WRITER_HOSTS,
    Services,
)
from tests.hosts.nemesis.survey import survey
from tests.integration.disks import eio_switch, small_tmpfs, sweep_stale_mounts
from tests.integration.recipes.history import check_histories
from walog.aio import AsyncClient
from walog.errors import is_retriable
from walog.log.log_config import LogConfig
from walog.log.position import Position
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.testing.hosts import HostCluster
from walog.testing.tempdirs import sweep_stale_dirs

LOG = "mixed"
WORK_PREFIX = "walog-nemesis-"
"""Work directories of ``python -m tests.hosts.nemesis`` are ``<tmp>/walog-nemesis-<pid>-*``."""
PROGRESS = 100
BOOKIE_ARGS = [
    "--disk-check-interval-s", "1",
    "--journal-file-bytes", "8MiB",
    "--entry-log-file-bytes", "8MiB",
    "--gc-interval-s", "10",
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class MixedConfig:
    """What one run does (times in seconds)."""

    seed: int
    seconds: float = 60.0
    bookies: int = 6
    racks: int = 3
    rate: float = 300.0
    roll_entries: int = 200
    retention_s: float = 20.0
    writer_session_s: float = 10.0
    kv_session_s: float = 6.0
    lost_after_s: float = 8.0
    repair_s: float = 120.0
    disk_mib: int = 96

    def layout(self) -> plan.Layout:
        """What the nemesis may strike (HostCluster's naming: bookie ``bN`` and ZooKeeper
        node ``zkN`` in rack ``(N-1) % racks + 1``)."""
        rack = {i: f"rack-{(i - 1) % self.racks + 1}" for i in range(1, self.bookies + 1)}
        return plan.Layout(
            bookies={f"b{i}": rack[i] for i in rack},
            zookeepers={f"zk{i}": rack[i] for i in (1, 2, 3)},
            clients=(*WRITER_HOSTS, *KV_HOSTS.values()),
            disk_bookie=f"b{self.bookies - 1}",
            eio_bookie=f"b{self.bookies}",
        )

    def schedule(self) -> list[plan.Fault]:
        """The run's schedule."""
        return plan.make_schedule(self.seed, self.seconds, self.layout())


@dataclasses.dataclass
class MixedResult:
    """What a run did and found."""

    config: MixedConfig
    schedule: list[plan.Fault]
    violations: list[Violation] = dataclasses.field(default_factory=list)
    totals: dict[str, object] = dataclasses.field(default_factory=dict)
    log: list[str] = dataclasses.field(default_factory=list)
    work_dir: Path | None = None
    started: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def ok(self) -> bool:
        """True when no rule was broken."""
        return not self.violations

    def summary(self) -> str:
        """The totals, one ``name=value`` each."""
        return " ".join(f"{name}={value}" for name, value in self.totals.items())

    def report(self) -> str:
        """Totals, violations, the replay command, the schedule and what was done."""
        minutes = self.config.seconds / 60
        lines = [f"seed={self.config.seed} {self.summary()}", f"work dir: {self.work_dir}"]
        lines += [f"VIOLATION {violation}" for violation in self.violations]
        lines.append(f"replay: python -m tests.hosts.nemesis --minutes {minutes:g} "
                     f"--seed {self.config.seed}")  # fmt: skip
        lines += ["schedule:", plan.format_schedule(self.schedule), "carried out:", *self.log]
        return "\n".join(lines)


def run_mixed(config: MixedConfig, work: Path) -> MixedResult:
    """Run and check once (see the module docstring). A phase that fails (the cluster does
    not heal, a takeover keeps failing) is a ``run_failed`` violation, so the report still
    names the seed and the schedule."""
    result = MixedResult(config, config.schedule(), work_dir=work)
    try:
        _run(config, work, result)
    except Exception as exc:  # reported with the seed instead of a bare traceback
        detail = "".join(traceback.format_exception(exc)[-6:])
        result.violations.append(Violation("run_failed", f"{type(exc).__name__}: {detail}"))
    result.totals["wall_s"] = round(time.monotonic() - result.started, 1)
    (work / "report.txt").write_text(result.report() + "\n")
    return result


@contextlib.contextmanager
def _control_log(path: Path) -> Iterator[None]:
    """What the control host's client logs (its takeovers and recoveries at the end), in
    ``path`` for the run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("walog")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def _run(config: MixedConfig, work: Path, result: MixedResult) -> None:
    layout = config.layout()
    sweep_stale_mounts()  # a killed run's: its namespaces go when the cluster starts
    sweep_stale_dirs(WORK_PREFIX)
    with contextlib.ExitStack() as stack:
        disk = stack.enter_context(small_tmpfs(config.disk_mib))
        bookies_dir = (work / "cluster" / "bookies").resolve()
        bookies_dir.mkdir(parents=True, exist_ok=True)
        (disk / layout.disk_bookie).mkdir()
        (bookies_dir / layout.disk_bookie).symlink_to(disk / layout.disk_bookie)
        eio = eio_switch(work, bookies_dir / layout.eio_bookie, calls="fsync,fdatasync,write,pread")
        cluster = HostCluster(
            config.bookies, config.racks, CLIENT_HOSTS, work / "cluster",
            bookie_args=BOOKIE_ARGS, bookie_env={layout.eio_bookie: eio.env},
        )  # fmt: skip
        stack.callback(cluster.close)
        stack.enter_context(_control_log(work / "logs" / "control.log"))
        cluster.start()
        cluster.call(lambda client: _create_log(client, config))
        services = Services(
            cluster, work, LOG, writer_session_s=config.writer_session_s, rate=config.rate,
            roll_entries=config.roll_entries, kv_session_s=config.kv_session_s,
            lost_after_s=config.lost_after_s,
        )  # fmt: skip
        services.start()
        nemesis = Nemesis(cluster, services, disk, eio, layout.eio_bookie)
        try:
            _carry_out(config, result, services, nemesis)
            result.log = nemesis.log
            _finish(config, work, result, cluster, services, nemesis)
        finally:
            result.log = nemesis.log + [f"note: {note}" for note in services.notes]


async def _create_log(client: AsyncClient, config: MixedConfig) -> None:
    settings = LogConfig(
        roll=RollPolicy(max_entries=config.roll_entries),
        retention=RetentionPolicy(max_age=config.retention_s),
    )
    log = await client.create_log(LOG, settings)
    await log.commit_cursor(TAIL_SUBSCRIPTION, Position(0, 0, 0))  # retention waits for it


def _acks(services: Services) -> int:
    return sum(len(writer.acks()) for writer in services.writers)


def _kv_acks(work: Path) -> int:
    return sum(1 for row in read_json_lines(work / "kv-acks.jsonl") if "key" in row)


def _carry_out(
    config: MixedConfig, result: MixedResult, services: Services, nemesis: Nemesis
) -> None:
    """Every step of the schedule on time, from the moment the processes are started (the
    first faults meet them starting up; the checks after the heal show they work)."""
    steps = plan.timeline(result.schedule)
    nemesis.began = began = time.monotonic()
    result.totals["setup_s"] = round(began - result.started, 1)
    while time.monotonic() - began < config.seconds:
        while steps and steps[0].at <= time.monotonic() - began:
            nemesis.step(steps.pop(0))
        services.tend()
        time.sleep(0.2)  # the schedule is a timetable: waiting for the clock is the point


def _wait(done: Callable[[], bool], services: Services, within: float) -> float | None:
    """Tend the processes until ``done()`` holds; the seconds it took (None: not within)."""
    began = time.monotonic()
    while not done():
        if time.monotonic() - began > within:
            return None
        services.tend()
        time.sleep(0.2)  # other processes' progress is polled
    return round(time.monotonic() - began, 1)


def _finish(
    config: MixedConfig,
    work: Path,
    result: MixedResult,
    cluster: HostCluster,
    services: Services,
    nemesis: Nemesis,
) -> None:
    found = result.violations
    healed_at = time.monotonic()
    services.tend()  # a decommission that just finished stops its bookie first
    found += [Violation("heal_failed", p) for p in nemesis.heal_all(services.decommission_target)]
    nemesis.note("healed")
    result.totals["heal_s"] = round(time.monotonic() - healed_at, 1)
    writes, commands = _acks(services) + PROGRESS, _kv_acks(work) + PROGRESS // 10
    for what, done in (
        ("log appends", lambda: _acks(services) >= writes),
        ("key-value commands", lambda: _kv_acks(work) >= commands),
        ("the decommission", lambda: not services.decommission_pending()),
    ):
        if _wait(done, services, 120.0) is None:
            found.append(Violation("no_progress", f"{what}: not after the heal within 120 s"))
    found += [Violation("daemon_exited", failure) for failure in services.daemon_failures()]
    nemesis.note("writes went on after the heal")
    services.stop_clients()
    nemesis.note("clients stopped")
    segments = cluster.call(lambda client: _close_logs(client), timeout=200.0)
    nemesis.note("logs closed")
    retired = frozenset({services.decommissioned} - {""})
    replication: list[Replication] = []

    def repaired() -> bool:
        replication[:] = [cluster.call(lambda client: survey(client, [LOG, KV_LOG], retired))]
        return not check_replication(replication[0])

    result.totals["repair_s"] = _wait(repaired, services, config.repair_s)
    nemesis.note("repairs surveyed")
    services.stop("autorecovery")
    _check(work, result, cluster, services, nemesis, segments, replication[0])


async def _close_logs(client: AsyncClient) -> dict[str, object]:
    """Take both logs over and close them (every ledger then closed); the main log's last
    entry and where retention cut it."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(is_retriable),
        stop=stop_after_delay(90.0),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        reraise=True,
    ):
        with attempt:
            for name in (LOG, KV_LOG):
                writer = await (await client.open_log(name)).open_writer()
                await writer.close()
    log = await client.open_log(LOG)
    ends = [s for s in await log.segments() if s.state == "CLOSED" and s.last_entry_id >= 0]
    meta = await log.metadata()
    return {
        "end": f"{ends[-1].ledger_id}:{ends[-1].last_entry_id}" if ends else "-",
        "truncated_through": meta.truncated_through,
        "ledgers_left": len(meta.ledgers),
    }


def _final_read(cluster: HostCluster, work: Path, end: str) -> subprocess.CompletedProcess[bytes]:
    out = work / "final.jsonl"
    out.unlink(missing_ok=True)
    proc = cluster.popen(
        OBSERVER_HOST,
        ["python", "-m", "tests.chaos.reader", cluster.metadata_uri, LOG, end, str(out)],
        log=subprocess.PIPE,
    )
    output, _ = proc.communicate(timeout=400)
    return subprocess.CompletedProcess(proc.args, proc.returncode, output)


def _check(
    work: Path,
    result: MixedResult,
    cluster: HostCluster,
    services: Services,
    nemesis: Nemesis,
    segments: dict[str, object],
    replication: Replication,
) -> None:
    found = result.violations
    read = _final_read(cluster, work, str(segments["end"]))
    nemesis.note("log read")
    if read.returncode != 0:
        found.append(Violation("reader_failed", read.stdout.decode(errors="replace")[-1500:]))
    parsed = load_history(work, 0, {"final": work / "final.jsonl"})
    tail_errors = [row["error"] for row in read_json_lines(work / "tail.jsonl") if "error" in row]
    if any("DataLossError" in str(error) for error in tail_errors):
        found.append(Violation("tail_data_loss", "retention deleted what the tail had not read"))
    acks, sent, epochs = [], {}, {}
    for writer in services.writers:
        acks += writer.acks()
        sent.update(writer.sent())
        epochs.update(writer.epochs())
    truncated = segments["truncated_through"]
    assert truncated is None or isinstance(truncated, Position)
    history = History(acks, parsed.reads, sent, parsed.tail, epochs, truncated, replication)
    found += check(history)
    found += _check_kv(work, services)
    whole = [r for r in parsed.tail or [] if truncated is not None and r.position < truncated]
    whole += parsed.reads["final"]
    keys = {record.key for record in whole}
    kv_rows = list(read_json_lines(work / "kv-acks.jsonl"))
    result.totals.update(
        acknowledged=len(acks),
        lost=sum(1 for ack in acks if ack.key not in keys),
        kv_acknowledged=sum(1 for row in kv_rows if "key" in row),
        kv_unknown=next((row["unknown"] for row in kv_rows if "unknown" in row), "?"),
        faults=sum(nemesis.done[kind] for kind in plan.FAULT_KINDS) + nemesis.done["decommission"],
        **{kind: nemesis.done[kind] for kind in (*plan.FAULT_KINDS, "decommission")},
        not_applied=sum(nemesis.failed.values()),
        takeovers=len(epochs),
        kv_leaderships=sum(
            (services.logs_dir / f"kv-{node}.log").read_text(errors="replace").count('"leader"')
            for node in KV_HOSTS
        ),
        ledgers=len({r.position.ledger_id for r in whole}),
        ledgers_left=segments["ledgers_left"],
        tail_read=len(parsed.tail or []),
        fragments=len(replication.fragments),
    )


def _check_kv(work: Path, services: Services) -> list[Violation]:
    rows = list(read_json_lines(work / "kv-acks.jsonl"))
    acked = {str(r["key"]): Position.parse(str(r["pos"])) for r in rows if "key" in r}
    final = next((r for r in rows if "same" in r), None)
    found = []
    if final is None or not final["same"]:
        found.append(Violation("kv_nodes_differ", f"the nodes' digests: {final}"))
    histories = {node: services.kv_history(node).read_text().splitlines() for node in KV_HOSTS}
    try:
        check_histories(histories, acked)
    except AssertionError as exc:
        found.append(Violation("kv_history", str(exc).splitlines()[0]))
    return found


__all__ = ["WORK_PREFIX", "MixedConfig", "MixedResult", "run_mixed"]

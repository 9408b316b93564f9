"""``walog bench``: run the scenarios on a local cluster, print a table and JSON, write a report.

Usage::

    walog bench --quick --json                 # ~1 minute; the last stdout line is JSON
    walog bench --peers --profile --report docs/benchmarks.md
    walog bench --quick --json --only latency,tail   # only the chosen scenarios
    walog bench --only curve-logs --curves-report docs/benchmarks.md   # one cost curve

Every number printed or written comes from this run. A scenario that cannot run (no Spark,
no peer binaries) is reported as skipped with the reason, never filled in.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import logging
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog
from tqdm import tqdm

import walog._loop
import walog.aio
from walog.bench import barrier, checkpoint_tail, curve_runs, floors, metrics_cost, peers, scenarios
from walog.bench.curves import CURVES, Curve, print_curves, write_curves
from walog.bench.profile import Profile, py_spy, sampling
from walog.bench.report import print_table, write_report
from walog.bench.restart import restart_killed
from walog.bench.stats import Rate, cpu_seconds, thread_cpu_seconds
from walog.latency import bucket_of, percentile_us
from walog.testing import LocalCluster
from walog.wire.durability import Durability

T = TypeVar("T")

GIB = 1 << 30
RESTART_TIMEOUT_S = 300.0
"""Longest a killed bookie may take to serve and register again (a GiB to replay)."""
SLOW_SYNC_S = 0.02
"""A journal sync at least this long counts as held up by the disk (tail scenario)."""
HANDOVER_ROUNDS = 5000
"""Calls handed to an idle loop thread for the sync API's floor (about half a second)."""

SCENARIOS = (
    "latency", "tail", "checkpoint", "ledger", "volatile", "log", "producers", "sync", "metrics",
    "recovery", "restart", "hosts", "soak",
)  # fmt: skip
"""Scenario names for ``--only``, in the order a run measures them."""


def _scenario_list(text: str) -> frozenset[str]:
    """Parse ``--only``: comma-separated names from :data:`SCENARIOS` and :data:`CURVES`."""
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(names - set(SCENARIOS) - set(CURVES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown scenario {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(SCENARIOS + CURVES)}"
        )
    return names


def _soak_rate(text: str) -> int:
    """Parse ``--soak-rate``: a positive number of entries/s, or 0 (``full``: no limit)."""
    if text.strip().lower() == "full":
        return 0
    try:
        rate = int(text)
    except ValueError:
        rate = -1
    if rate < 0:
        raise argparse.ArgumentTypeError(
            f"--soak-rate must be a number of entries/s, 0 or 'full', got {text!r}"
        )
    return rate


class _Plan:
    """Sizes of one run: quick (about a minute) or full."""

    def __init__(self, quick: bool, seconds: float | None) -> None:
        self.quick = quick
        self.seconds = seconds if seconds is not None else (3.0 if quick else 10.0)
        tiny = self.seconds < 1.0
        self.recovery_lengths = (
            [10, 100] if tiny else [100, 1000, 5000] if quick else [1000, 10_000, 100_000]
        )
        self.restart_mb = 1.0 if tiny else 8.0 if quick else 64.0
        self.peer_seconds = max(2.0, self.seconds)
        self.echo_batches = [1, 10, 100] if quick else [1, 10, 100, 1000]


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``walog bench`` (it starts a cluster of its own: no --metadata)."""
    from walog.cli.options import CommandParser

    parser = CommandParser(
        prog="walog bench",
        description="Measure walog on a local 3-bookie cluster (E3/Qw3/Qa2, 1 KiB entries, "
        "100-byte log records).",
    )
    parser.add_argument("--quick", action="store_true", help="short run (about a minute)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON last")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per scenario")
    parser.add_argument(
        "--only",
        type=_scenario_list,
        default=frozenset(SCENARIOS),
        metavar="NAMES",
        help=f"run only these walog scenarios, comma-separated ({','.join(SCENARIOS)}), "
        f"or cost curves ({','.join(CURVES)}); default: every scenario, no curve",
    )
    parser.add_argument(
        "--curves",
        action="store_true",
        help="also measure every cost curve (how costs grow with logs, readers, stored "
        "ledgers, a log's length, stored data; several minutes each)",
    )
    parser.add_argument(
        "--curve-max-entries",
        type=int,
        default=None,
        metavar="N",
        help="curve-index: stop the entries curve at N entries (its points: 100k, 1M, 10M)",
    )
    parser.add_argument(
        "--curve-max-ledgers",
        type=int,
        default=None,
        metavar="N",
        help="curve-index: stop the ledgers curve at N ledgers (its points: 1k, 10k, 100k)",
    )
    parser.add_argument(
        "--curves-report",
        type=Path,
        default=None,
        metavar="PAGE",
        help="put each measured curve's table and plot into this Markdown page (its "
        "section replaced, the rest kept; plots under img/ next to it)",
    )
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="only the hosts scenario: appends between hosts (network namespaces, needs "
        "root) next to the same on loopback",
    )
    parser.add_argument(
        "--soak",
        type=float,
        metavar="MINUTES",
        default=None,
        help="only the soak: appends through a log for MINUTES (its retention deletes old "
        "ledgers), the bookies' memory and disks read every few seconds; fails if a bookie "
        "dies, its storage fails or its disk use keeps growing",
    )
    parser.add_argument(
        "--soak-rate",
        type=_soak_rate,
        metavar="N",
        default=None,
        help="entries/s of the soak (default 5000); 0 or 'full': as fast as the writer goes",
    )
    parser.add_argument(
        "--restart-gib",
        type=float,
        metavar="GIB",
        default=None,
        help="only the bookie restart, after GIB GiB of journal not checkpointed: the "
        "bookies hold that much in their write caches (--write-cache-bytes) and checkpoint "
        "hourly",
    )
    parser.add_argument("--peers", action="store_true", help="also etcd, NATS and floors")
    parser.add_argument("--profile", action="store_true", help="py-spy the hot paths")
    parser.add_argument(
        "--spark",
        choices=("auto", "yes", "no"),
        default="auto",
        help="Spark batch scan and sink, the sink also on a standalone cluster (auto: in full "
        "runs when PySpark is present)",
    )
    parser.add_argument("--output", type=Path, default=None, help="write the JSON here")
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="write a Markdown report here, plots under img/ next to it",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the local cluster keeps its files (default: a temp dir)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="measure nothing: render --report from the results of an earlier run",
    )
    parser.add_argument(
        "--metadata",
        default=None,
        metavar="URI",
        help="measure this running cluster instead of starting a local one (no bookie "
        "restart, no bookie CPU or profiles then)",
    )
    return parser


class _Run:
    """One benchmark run: the cluster, the results so far, progress bars."""

    def __init__(
        self,
        args: argparse.Namespace,
        plan: _Plan,
        uri: str,
        cluster: LocalCluster | None,
        data_dir: Path,
    ) -> None:
        self.args = args
        self.plan = plan
        self.cluster = cluster
        self.uri = uri
        self.data_dir = data_dir
        self.results: dict[str, Any] = {}
        #: CPU seconds by process and thread name during the last :meth:`cpu` block.
        self.thread_cpu: dict[str, dict[str, float]] = {}
        self.skipped: dict[str, str] = {}
        self.profiles: list[Profile] = []
        self.failures: list[str] = []
        """Why the run failed (the soak's checks), empty when it did not."""

    @contextlib.contextmanager
    def bar(self, name: str, unit: str = "op") -> Iterator[Callable[[int], None]]:
        with tqdm(
            desc=f"{name:<26}",
            unit=unit,
            file=sys.stderr,
            leave=False,
            disable=self.args.no_progress,
            dynamic_ncols=True,
        ) as progress:
            yield progress.update

    def pids(self) -> dict[str, int]:
        """The client (this process) and the running bookies, by label."""
        pids = {"client": os.getpid()}
        if self.cluster is not None:
            for i in range(len(self.cluster.bookie_ids)):
                if pid := self.cluster.pid(i):
                    pids[f"bookie-{i}"] = pid
        return pids

    @contextlib.contextmanager
    def cpu(self) -> Iterator[dict[str, float]]:
        """Yield a dict that holds, after the block, the CPU seconds (user + system, all
        threads) each process of :meth:`pids` used during the block; the same split by
        thread lands in :attr:`thread_cpu`."""
        pids = self.pids()
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        threads_before = {name: thread_cpu_seconds(pid) for name, pid in pids.items()}
        used: dict[str, float] = {}
        yield used
        for name, pid in pids.items():
            used[name] = cpu_seconds(pid) - before[name]
        self.thread_cpu = {}
        for name, pid in pids.items():
            earlier = threads_before[name]
            self.thread_cpu[name] = {
                thread: seconds - earlier.get(thread, 0.0)
                for thread, seconds in thread_cpu_seconds(pid).items()
            }

    def aio(self, body: Callable[[walog.aio.AsyncClient], Coroutine[Any, Any, T]]) -> T:
        async def run() -> T:
            client = await walog.aio.connect(self.uri)
            try:
                return await body(client)
            finally:
                await client.close()

        return walog._loop.run(run())

    def walog_scenarios(self) -> None:
        seconds = self.plan.seconds
        r = self.results
        only = self.args.only
        # One entry at a time first, while the bookies have nothing to flush: the throughput
        # scenarios leave hundreds of MB per bookie for their checkpoints to write to the
        # disk the journals sync on, and would measure that instead.
        if "latency" in only:
            with self.bar("append, one in flight") as tick, self.cpu() as cpu:
                measured = self.aio(lambda c: scenarios.append_latency(c, seconds, progress=tick))
            summary = measured.latency.summary()
            r["cpu_us_per_append"] = _per_op(cpu, measured.latency.count)
            r["append_p50_ms"], r["append_p99_ms"] = summary["p50_ms"], summary["p99_ms"]
            r["append_p999_ms"] = summary["p999_ms"]
            r["append_latency_samples"] = int(summary["count"])
            r["append_stages"] = measured.stages
            with self.bar("read barrier, writer busy / idle") as tick:
                barriers = self.aio(lambda c: barrier.barrier_latency(c, seconds, progress=tick))
            for key, latency in (("busy", barriers.busy), ("idle", barriers.idle)):
                summary = latency.summary()
                r[f"barrier_{key}_p50_ms"] = summary["p50_ms"]
                r[f"barrier_{key}_p99_ms"] = summary["p99_ms"]
        if "tail" in only:
            with self.bar("tail lag writer->reader", unit="rec") as tick, self.cpu() as cpu:
                tail = self.aio(lambda c: scenarios.tail_lag(c, seconds, progress=tick))
            summary = tail.lag.summary()
            r["tail_records_per_s"] = round(tail.lag.count / seconds)
            r["cpu_us_per_tail_record"] = _per_op(cpu, tail.lag.count)
            r["tail_lag_p50_ms"], r["tail_lag_p99_ms"] = summary["p50_ms"], summary["p99_ms"]
            r["tail_lag_p999_ms"] = summary["p999_ms"]
            for key, part in (("tail_ack", tail.acked), ("tail_after_ack", tail.after_ack)):
                r[f"{key}_p50_ms"] = round(part.percentile_ms(50.0), 3)
                r[f"{key}_p99_ms"] = round(part.percentile_ms(99.0), 3)
            slowest = percentile_us(tail.journal_syncs, 100.0)
            if slowest is not None:
                r["tail_journal_sync_max_ms"] = round(slowest / 1000.0, 1)
                slow = bucket_of(SLOW_SYNC_S)
                r["tail_journal_syncs_over_20ms"] = sum(tail.journal_syncs[slow:])
        if "checkpoint" in only and (not self.plan.quick or not only >= frozenset(SCENARIOS)):
            self.tail_while_checkpointing()
        if "ledger" in only:
            with self.bar("ledger append PERSISTENT") as tick, self.cpu() as cpu:
                rate = self.aio(lambda c: scenarios.ledger_append(c, seconds, progress=tick))
            r["ledger_append_eps"] = round(rate.per_second)
            r["cpu_us_per_entry"] = per_entry = _per_op(cpu, rate.ops)
            r["cpu_us_per_entry_total"] = round(sum(per_entry.values()), 1)
            r["cpu_us_per_entry_by_thread"] = {
                name: {t: round(s * 1e6 / rate.ops, 2) for t, s in threads.items() if s > 0}
                for name, threads in self.thread_cpu.items()
            }
            r["ledger_append_mb_s"] = round(rate.mb_per_second, 2)
        if "volatile" in only:
            with self.bar("ledger append VOLATILE") as tick:
                rate = self.aio(
                    lambda c: scenarios.ledger_append(
                        c, seconds, durability=Durability.VOLATILE, progress=tick
                    )
                )
            r["ledger_append_volatile_eps"] = round(rate.per_second)
        if "log" in only:
            with self.bar("log append 100 B records", unit="rec") as tick, self.cpu() as cpu:
                rate = self.aio(lambda c: scenarios.log_append(c, seconds, progress=tick))
            r["log_append_rps"] = round(rate.per_second)
            r["cpu_us_per_record"] = _per_op(cpu, rate.ops, digits=2)
            with self.bar("log writer memory, 100,000 records in flight", unit="run"):
                probe = _writer_memory(self.uri, WRITER_MEMORY_RECORDS)
            r["writer_peak_rss_mib_100k_in_flight"] = probe["peak_rss_mib"]
        if "producers" in only:
            self.producer_cost()
        if "sync" in only:
            self.sync_api()
        if "metrics" in only:
            self.metrics_cost()
        if "recovery" in only:
            self.recovery()

    def tail_while_checkpointing(self) -> None:
        """The tail lag through a checkpoint of every bookie (walog.bench.checkpoint_tail);
        in full runs, or in quick ones when ``--only`` names it."""
        if self.cluster is None:
            self.skipped["tail_lag_checkpoint_p99_ms"] = "the bookies run elsewhere (--metadata)"
            return
        with self.bar("tail lag during checkpoints", unit="rec") as tick:
            measured = checkpoint_tail.tail_while_checkpointing(
                self.cluster, self.aio, self.plan.seconds, tick
            )
        r = self.results
        lag = measured.tail.lag
        r["tail_lag_checkpoint_p50_ms"] = round(lag.percentile_ms(50.0), 3)
        r["tail_lag_checkpoint_p99_ms"] = round(lag.percentile_ms(99.0), 3)
        r["tail_lag_checkpoint_max_ms"] = round(lag.percentile_ms(100.0), 3)
        r["tail_checkpoint_seconds"] = measured.seconds
        r["tail_checkpoint_entries_per_bookie"] = min(measured.checkpointed)

    def sync_api(self) -> None:
        """The blocking API next to asyncio: pipelined ledger appends (in batches with
        ``append_many_async``, and one a call with ``append_async``), log appends likewise
        and one append in flight."""
        r, seconds = self.results, self.plan.seconds
        with self.bar("sync API ledger append_many") as tick:
            rate = scenarios.sync_ledger_append(
                self.uri, seconds, batch=scenarios.LEDGER_BATCH, progress=tick
            )
        r["sync_ledger_append_eps"] = r["sync_append_eps"] = round(rate.per_second)
        with self.bar("sync API ledger append") as tick:
            rate = scenarios.sync_ledger_append(self.uri, seconds, progress=tick)
        r["sync_ledger_append_single_eps"] = round(rate.per_second)
        with self.bar("sync API log append 100 B records", unit="rec") as tick:
            rate = scenarios.sync_log_append(self.uri, seconds, progress=tick)
        r["sync_log_append_rps"] = round(rate.per_second)
        with self.bar("sync API log append_async 100 B", unit="rec") as tick:
            rate = scenarios.sync_log_append(self.uri, seconds, batch=1, progress=tick)
        r["sync_log_append_single_rps"] = round(rate.per_second)
        with self.bar("sync API append, one in flight") as tick:
            latency = scenarios.sync_append_latency(self.uri, seconds, progress=tick)
        summary = latency.summary()
        r["sync_append_p50_ms"], r["sync_append_p99_ms"] = summary["p50_ms"], summary["p99_ms"]
        if "append_p50_ms" in r:
            r["sync_append_extra_p50_ms"] = round(r["sync_append_p50_ms"] - r["append_p50_ms"], 3)
        # The two thread wake-ups a sync call adds, with nothing else running meanwhile.
        there, back = floors.thread_handover_floor(HANDOVER_ROUNDS)
        r["handover_floor_there_us"] = round(there.percentile_ms(50.0) * 1000.0, 1)
        r["handover_floor_back_us"] = round(back.percentile_ms(50.0) * 1000.0, 1)
        for sync_key, aio_key in (
            ("sync_ledger_append_eps", "ledger_append_eps"),
            ("sync_ledger_append_single_eps", "ledger_append_eps"),
            ("sync_log_append_rps", "log_append_rps"),
            ("sync_log_append_single_rps", "log_append_rps"),
        ):
            if r.get(aio_key):
                r[f"{sync_key}_vs_aio"] = round(r[sync_key] / r[aio_key], 2)
        if "ledger_append_eps" in r:
            r["aio_append_eps"] = r["ledger_append_eps"]

    def producer_cost(self) -> None:
        """Log appends without and with a producer session, alternated (plain, producer,
        plain, producer) so that a drift of the machine weighs on both alike."""
        rates: dict[str | None, list[float]] = {None: [], "bench": []}
        with self.bar("log append, producer session off/on", unit="rec") as tick:
            for producer in (None, "bench", None, "bench"):

                async def run(c: walog.aio.AsyncClient, producer: str | None = producer) -> Rate:
                    seconds = self.plan.seconds / 2
                    return await scenarios.log_append(c, seconds, progress=tick, producer=producer)

                rates[producer].append(self.aio(run).per_second)
        plain, session = (sum(rates[k]) / len(rates[k]) for k in (None, "bench"))
        r = self.results
        r["log_append_plain_rps"] = round(plain)
        r["log_append_producer_rps"] = round(session)
        r["producer_session_cost_pct"] = round(100.0 * (plain - session) / plain, 2)

    def metrics_cost(self) -> None:
        """Pipelined appends with client metrics off and on, bookies scraped while on."""
        cluster = self.cluster
        urls = (
            []
            if cluster is None
            else [f"{cluster.metrics_url(b)}/metrics" for b in cluster.bookie_ids]
        )
        with self.bar("ledger append, metrics off/on") as tick:
            cost = metrics_cost.measure(self.uri, self.plan.seconds / 4, urls, progress=tick)
        r = self.results
        r["metrics_off_eps"] = round(cost.off_eps)
        r["metrics_on_eps"] = round(cost.on_eps)
        r["metrics_overhead_pct"] = round(cost.overhead_pct, 2)
        r["metrics_client_cpu_us_off"] = round(cost.off_cpu_us, 2)
        r["metrics_client_cpu_us_on"] = round(cost.on_cpu_us, 2)

    def recovery(self) -> None:
        """Recovery time of open ledgers of several lengths (:data:`_Plan.recovery_lengths`)."""
        r = self.results
        with self.bar("recovery vs length", unit="ledger") as tick:
            points = walog._loop.run(
                scenarios.recovery_time(self.uri, self.plan.recovery_lengths, progress=tick)
            )
        r["recovery"] = [{"entries": p.entries, "seconds": round(p.seconds, 4)} for p in points]
        r["recovery_s"] = round(max(p.seconds for p in points), 4)

    def profile(self) -> None:
        """Sample the client and the bookies with py-spy during a second run of the
        pipelined ledger append and of the log append (the measured runs stay unprofiled)."""
        if py_spy() is None:
            self.skipped["profile"] = "py-spy is not installed (pip install 'walog[bench]')"
            return
        seconds = min(self.plan.seconds, 5.0)
        pids = self.pids()
        directory = self.data_dir / "profiles"
        runs: tuple[tuple[str, Callable[[walog.aio.AsyncClient], Coroutine[Any, Any, Any]]], ...]
        runs = (
            ("ledger append", lambda c: scenarios.ledger_append(c, seconds)),
            ("log append", lambda c: scenarios.log_append(c, seconds)),
        )
        for name, body in runs:
            with self.bar(f"profile: {name}", unit="run") as tick:
                with sampling(pids, directory / name.replace(" ", "-"), seconds) as profiles:
                    self.aio(body)
                tick(1)
            for profile in profiles:
                profile.label = f"{name}: {profile.label}"
                self.profiles.append(profile)

    def spark(self) -> None:
        """Spark batch scan and sink MB/s on local[2], and the sink's on a standalone cluster of
        two one-core workers, in its own interpreter: the JVM gateway is forked, and forking a
        process with live gRPC threads is unsafe."""
        full = self.args.only >= frozenset(SCENARIOS)
        wanted = self.args.spark == "yes" or (
            self.args.spark == "auto" and full and not self.plan.quick
        )
        if not wanted:
            return
        if importlib.util.find_spec("pyspark") is None:
            self.skipped["spark_scan_mb_s"] = "PySpark is not installed"
            return
        if importlib.util.find_spec("walog.spark.bench") is None:
            self.skipped["spark_scan_mb_s"] = "walog.spark.bench is not in this build"
            return
        total = 16.0 if self.plan.quick else 64.0
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        command = [sys.executable, "-m", "walog.spark.bench", "--metadata", self.uri]
        command += ["--total-mb", str(total), "--master", "local[2]", "--sink"]
        command += ["--standalone-workers", "2"]
        # Two tries: on a loaded machine the JVM gateway now and then dies before it starts
        # ("Java gateway process exited before sending its port number").
        with self.bar("spark scan and sink", unit="run") as tick:
            for _ in range(2):
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
                match = re.search(r"([0-9.]+) MB/s", done.stdout)
                if done.returncode == 0 and match is not None:
                    break
            tick(1)
        if done.returncode != 0 or match is None:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
            self.skipped["spark_scan_mb_s"] = f"the Spark scan failed: {lines[-1][:200]}"
            return
        self.results["spark_scan_mb_s"] = float(match[1])
        self.results["spark_scan_total_mb"] = total
        sink = re.search(r"spark sink: ([0-9.]+) MB/s", done.stdout)
        if sink is not None:
            self.results["spark_sink_mb_s"] = float(sink[1])
        standalone = re.search(r"spark sink, standalone cluster [^:]*: (.*)", done.stdout)
        if standalone is None:
            self.skipped["spark_sink_standalone_mb_s"] = "the Spark bench did not report it"
        elif measured := re.match(r"([0-9.]+) MB/s", standalone[1]):
            self.results["spark_sink_standalone_mb_s"] = float(measured[1])
        else:
            self.skipped["spark_sink_standalone_mb_s"] = standalone[1].removeprefix("failed: ")

    def bookie_restart(self) -> None:
        """Fill the bookies, SIGKILL one, time its restart (walog.bench.restart): until it
        serves again (journal replayed) and until it is registered again."""
        if "restart" not in self.args.only:
            return
        if self.cluster is None:
            self.skipped["bookie_restart_s"] = "needs the local cluster (not with --metadata)"
            return
        cluster = self.cluster
        with self.bar("bookie restart", unit="step") as tick:
            written = self.aio(lambda c: scenarios.fill_ledger(c, self.plan.restart_mb))
            tick(1)
            timed = restart_killed(cluster, 0, timeout_s=RESTART_TIMEOUT_S)
            tick(1)
        r = self.results
        r["bookie_restart_serving_s"] = round(timed["serving_s"], 3)
        r["bookie_restart_s"] = round(timed["registered_s"], 3)
        r["bookie_restart_replay_s"] = round(timed["replay_s"], 3)
        r["journal_mb"] = round(timed["journal_bytes"] / 1e6, 2)
        r["journal_replay_mb_s"] = round(timed["journal_bytes"] / 1e6 / timed["registered_s"], 1)
        r["journal_replayed_mb"] = round(timed["replayed_bytes"] / 1e6, 2)
        r["journal_replayed_records"] = int(timed["replayed_records"])
        if timed["replay_s"] > 0:
            rate = timed["replayed_bytes"] / 1e6 / timed["replay_s"]
            r["journal_replay_rate_mb_s"] = round(rate, 1)
        r["restart_written_mb"] = round(written / 1e6, 2)

    def hosts(self) -> None:
        """Appends between hosts next to the same on loopback (walog.bench.hosts)."""
        if "hosts" not in self.args.only:
            return
        from walog.bench import hosts

        with self.bar("hosts vs loopback", unit="step") as tick:
            measured, skipped = hosts.measure(self.plan.seconds, self.data_dir / "hosts")
            tick(1)
        self.results.update(measured)
        if skipped is not None:
            self.skipped["hosts_append_eps"] = skipped

    def soak(self) -> None:
        """A long run through a log with retention, watching the bookies' memory and disks
        (walog.bench.soak); only with ``--soak``. Why it failed, if it did, goes to
        :attr:`failures`."""
        if "soak" not in self.args.only or self.args.soak is None:
            return
        from walog.bench import soak

        if self.cluster is None:
            self.skipped["bookie_rss_growth_pct"] = "the bookies run elsewhere (--metadata)"
            return
        bookies = soak.watched_bookies(self.cluster)
        seconds = self.args.soak * 60
        warmup = min(120.0, seconds / 4)
        rate = self.args.soak_rate if self.args.soak_rate is not None else soak.RATE
        with self.bar("soak: appends, bookie memory and disks") as tick:
            measured = self.aio(
                lambda c: soak.soak(
                    c, seconds, bookies, rate=rate or None, warmup=warmup, progress=tick
                )
            )
        self.results.update(measured.results())
        self.failures += measured.failures()

    def peer_scenarios(self) -> None:
        seconds = self.plan.peer_seconds
        r = self.results
        with self.bar("floor: fdatasync 4 KiB", unit="sync"):
            fsync = floors.fdatasync_floor(self.data_dir, min(seconds, 3.0))
        r["fsync_floor_us"] = round(fsync.percentile_ms(50.0) * 1000.0, 1)
        r["fsync_floor_p99_us"] = round(fsync.percentile_ms(99.0) * 1000.0, 1)
        with self.bar("floor: grpc.aio echo", unit="batch"):
            echo, round_trip = floors.grpc_echo_floor(self.plan.echo_batches, min(seconds, 3.0))
        r["grpc_echo_eps"] = {str(batch): round(rate.per_second) for batch, rate in echo.items()}
        r["grpc_rtt_p50_us"] = round(round_trip.percentile_ms(50.0) * 1000.0, 1)
        r["grpc_rtt_p99_us"] = round(round_trip.percentile_ms(99.0) * 1000.0, 1)
        for transport, prefix in (("grpc", ""), ("native", "native_"), ("unix", "unix_")):
            with self.bar(f"floor: one message to 3 echo processes, {transport}", unit="run"):
                quorum = floors.quorum_floor(min(seconds, 3.0), self.data_dir, transport=transport)
            r[f"{prefix or 'grpc_'}fanout_p50_us"] = round(
                quorum.bare.percentile_ms(50.0) * 1000.0, 1
            )
            r[f"{prefix}quorum_floor_p50_us"] = round(quorum.synced.percentile_ms(50.0) * 1000.0, 1)
            r[f"{prefix}quorum_floor_p99_us"] = round(quorum.synced.percentile_ms(99.0) * 1000.0, 1)
            r[f"{prefix}quorum_floor_cpu_us"] = round(quorum.cpu_s_per_round * 1e6, 1)
        for name, measure, key in (
            ("etcd 3 members", peers.etcd, "etcd"),
            ("NATS JetStream R3", peers.nats, "nats"),
        ):
            with self.bar(name, unit="run") as tick:
                try:
                    result = measure(seconds)
                except peers.PeerUnavailable as exc:
                    self.skipped[key] = str(exc)
                    continue
                except Exception as exc:  # a peer that fails to start is reported, not fatal
                    self.skipped[key] = f"{type(exc).__name__}: {exc}"
                    continue
                tick(1)
            if key == "etcd":
                r["etcd_put_ops"] = round(result["put_ops"])
                r["etcd_put_p50_ms"] = result["latency"]["p50_ms"]
                r["etcd_put_p99_ms"] = result["latency"]["p99_ms"]
                r["etcd_put_p999_ms"] = result["latency"]["p999_ms"]
            else:
                r["nats_r3_sync_ops"] = round(result["sync_ops"])
                r["nats_p50_ms"] = result["latency"]["p50_ms"]
                r["nats_p99_ms"] = result["latency"]["p99_ms"]
                r["nats_p999_ms"] = result["latency"]["p999_ms"]
        if r.get("nats_r3_sync_ops") and "ledger_append_eps" in r:
            r["vs_nats_x"] = round(r["ledger_append_eps"] / r["nats_r3_sync_ops"], 2)
        if r.get("etcd_put_ops") and "ledger_append_eps" in r:
            r["vs_etcd_x"] = round(r["ledger_append_eps"] / r["etcd_put_ops"], 2)


def _unflushed_bookie_args(gib: float) -> list[str]:
    """Bookie flags that keep ``gib`` GiB of entries in the write cache, unflushed: a cache
    larger than that and a checkpoint an hour (``--restart-gib``)."""
    cache = int((gib + 1) * GIB)
    return ["--write-cache-bytes", str(cache), "--checkpoint-interval-s", "3600"]


SOAK_BOOKIE_ARGS = ("--gc-interval-s", "10")
"""Bookie options of the soak's cluster: deleted ledgers collected within 10 s (the scan
interval) instead of a minute; the grace after a ledger's last write is the default."""

WRITER_MEMORY_RECORDS = 100_000
"""Records a log writer holds in flight in the memory measurement."""


def _writer_memory(uri: str, records: int) -> dict[str, float]:
    """Run :mod:`walog.bench.memory_probe` in a fresh interpreter; its JSON answer."""
    probe = subprocess.run(
        [sys.executable, "-m", "walog.bench.memory_probe", uri, str(records)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if probe.returncode != 0:
        raise RuntimeError(f"the writer memory probe failed: {probe.stderr.strip()[-500:]}")
    answer: dict[str, float] = json.loads(probe.stdout.strip().splitlines()[-1])
    return answer


def _per_op(cpu: dict[str, float], ops: int, digits: int = 1) -> dict[str, float]:
    """CPU microseconds per operation by process, from the seconds of :meth:`_Run.cpu`."""
    return {name: round(seconds * 1e6 / max(ops, 1), digits) for name, seconds in cpu.items()}


def _machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpu_idle": _cpu_idle(),
    }


def _cpu_idle() -> str | None:
    """How idle CPUs wait, where Linux says (``cpuidle`` driver and, in a virtual machine
    with ``haltpoll``, how long an idle CPU polls before it halts). A halted virtual CPU
    takes tens of microseconds to wake: every hand-over between threads or processes that
    finds its core idle pays that, which weighs on the one-at-a-time scenarios."""
    base = Path("/sys/devices/system/cpu/cpuidle")
    try:
        driver = (base / "current_driver").read_text().strip()
    except OSError:
        return None
    try:
        poll_ns = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns").read_text()
    except OSError:
        return f"cpuidle {driver}"
    return f"cpuidle {driver}, guest_halt_poll_ns {poll_ns.strip()}"


def _quiet_logging() -> None:
    """Library log lines to stderr, WARNING and up (``WALOG_LOG_LEVEL`` to change), so that
    stdout carries only the table and the JSON line. An application's own set-up is kept."""
    if structlog.is_configured():
        return
    level = logging.getLevelName(os.environ.get("WALOG_LOG_LEVEL", "WARNING").upper())
    logging.basicConfig(
        level=level if isinstance(level, int) else logging.WARNING,
        stream=sys.stderr,
        format="%(name)s: %(message)s",
    )
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(
            level if isinstance(level, int) else logging.WARNING
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``walog bench``; returns the exit status."""
    arg_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(arg_list)
    if args.hosts:
        args.only = frozenset({"hosts"})
    if args.soak is not None:
        if args.soak <= 0:
            build_parser().error(f"--soak must be > 0 minutes, got {args.soak}")
        args.only = frozenset({"soak"})
    elif args.soak_rate is not None:
        build_parser().error("--soak-rate needs --soak MINUTES")
    if args.restart_gib is not None:
        if args.restart_gib <= 0 or args.soak is not None or args.hosts:
            build_parser().error("--restart-gib takes a size > 0, without --soak or --hosts")
        args.only = frozenset({"restart"})
    _quiet_logging()
    if args.from_json is not None:
        if args.report is None and args.curves_report is None:
            build_parser().error("--from-json needs --report or --curves-report")
        earlier = json.loads(args.from_json.read_text())
        if args.report is not None:
            write_report(earlier, args.report)
        if args.curves_report is not None:
            stored = earlier.get("curves", {}).values()
            write_curves([Curve.from_json(c) for c in stored], args.curves_report)
        return 0
    if args.curves:
        args.only = args.only | frozenset(CURVES)
    if args.report is not None and not args.only >= frozenset(SCENARIOS):
        build_parser().error("--report needs every scenario (leave out --only)")
    if args.seconds is not None and args.seconds <= 0:
        build_parser().error(f"--seconds must be > 0, got {args.seconds}")
    plan = _Plan(args.quick, args.seconds)
    if args.restart_gib is not None:
        plan.restart_mb = args.restart_gib * GIB / 1e6
    started = datetime.datetime.now(datetime.UTC)
    machine = _machine()
    data_dir = args.data_dir
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="walog-bench-")))
        data_dir.mkdir(parents=True, exist_ok=True)
        cluster = None
        uri = args.metadata
        if uri is None:
            # The soak's bookies collect deleted ledgers within a minute (the default grace
            # keeps a ledger written in the last 5 minutes): its steady state comes early.
            gc_args = [] if args.soak is None else list(SOAK_BOOKIE_ARGS)
            if args.restart_gib is not None:
                gc_args = _unflushed_bookie_args(args.restart_gib)
            cluster = stack.enter_context(
                LocalCluster(
                    bookies=3, data_dir=data_dir / "cluster", metrics=True, bookie_args=gc_args
                )
            )
            uri = cluster.metadata_uri
        run = _Run(args, plan, uri, cluster, data_dir)
        run.walog_scenarios()
        if args.profile:
            run.profile()
        run.spark()
        if args.peers:
            run.peer_scenarios()
        run.bookie_restart()
        run.hosts()
        run.soak()
        curves = curve_runs.measure(run, args.only, arg_list, plan.seconds)
    results: dict[str, Any] = {
        **run.results,
        "skipped": run.skipped,
        "config": {
            "ledger_window": scenarios.LEDGER_WINDOW,
            "log_window": scenarios.LOG_WINDOW,
            "log_batch": scenarios.LOG_BATCH,
            "entry_bytes": scenarios.ENTRY_BYTES,
            "record_bytes": scenarios.RECORD_BYTES,
        },
        "quick": plan.quick,
        "seconds_per_scenario": plan.seconds,
        "command": shlex.join(["walog", "bench", *arg_list]),
        "started_utc": started.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_s": round((datetime.datetime.now(datetime.UTC) - started).total_seconds(), 1),
        "machine": machine,
    }
    if run.profiles:
        results["profile"] = [
            {
                "process": p.label,
                "samples": p.samples,
                "by_area": p.by_area,
                "by_function": p.by_function,
            }
            for p in run.profiles
        ]
    if curves:
        results["curves"] = {curve.name: curve.to_json() for curve in curves}
    print_table(results, sys.stdout)
    for line in print_curves(curves):
        print(line)
    if "soak_disk_by_minute" in results:
        from walog.bench.soak_watch import print_disks

        print_disks(results, sys.stdout)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n")
    if args.report is not None:
        write_report(results, args.report)
    if args.curves_report is not None and curves:
        write_curves(curves, args.curves_report)
    if args.json:
        print(json.dumps(results), flush=True)
    if run.failures:
        print(f"walog bench: the soak failed: {'; '.join(run.failures)}", file=sys.stderr)
        return 1
    return 0

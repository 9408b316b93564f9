"""Render benchmark results: a text table, plots (matplotlib, PNG) and a Markdown report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from walog.bench.sections import (
    cpu_section,
    floor_section,
    hosts_section,
    profile_section,
    saturation_section,
)

# key -> (label, unit, target, higher is better)
TARGETS: dict[str, tuple[str, str, float | None, bool]] = {
    "ledger_append_eps": ("ledger append, PERSISTENT, pipelined", "entries/s", 120_000, True),
    "ledger_append_volatile_eps": ("ledger append, VOLATILE, pipelined", "entries/s", None, True),
    "sync_ledger_append_eps": (
        "ledger append, sync API (append_many), pipelined",
        "entries/s",
        None,
        True,
    ),
    "sync_ledger_append_eps_vs_aio": ("ledger append, sync API / asyncio", "x", 0.8, True),
    "sync_ledger_append_single_eps": (
        "ledger append, sync API (append_async per entry), pipelined",
        "entries/s",
        None,
        True,
    ),
    "sync_ledger_append_single_eps_vs_aio": (
        "ledger append, sync API per entry / asyncio",
        "x",
        None,
        True,
    ),
    "cpu_us_per_entry_total": ("CPU per replicated entry, client + bookies", "us", 12.0, False),
    "log_append_rps": ("log append, 100 B records", "records/s", 700_000, True),
    "sync_log_append_rps": ("log append, sync API (append_many)", "records/s", None, True),
    "writer_peak_rss_mib_100k_in_flight": (
        "log writer process, 100,000 records in flight, peak RSS",
        "MiB",
        200.0,
        False,
    ),
    "sync_log_append_rps_vs_aio": ("log append, sync API / asyncio", "x", 0.9, True),
    "sync_log_append_single_rps": (
        "log append, sync API (append_async per record)",
        "records/s",
        None,
        True,
    ),
    "sync_log_append_single_rps_vs_aio": (
        "log append, sync API per record / asyncio",
        "x",
        0.6,
        True,
    ),
    "metrics_off_eps": ("ledger append, client metrics off", "entries/s", None, True),
    "metrics_on_eps": ("ledger append, client metrics on + scrapes", "entries/s", None, True),
    "metrics_overhead_pct": ("cost of metrics to the append (off vs on)", "%", 3.0, False),
    "log_append_producer_rps": (
        "log append, 100 B records, producer session",
        "records/s",
        None,
        True,
    ),
    "producer_session_cost_pct": (
        "cost of a producer session to the log append (off vs on)",
        "%",
        5.0,
        False,
    ),
    "metrics_client_cpu_us_off": ("client CPU per entry, metrics off", "us", None, False),
    "metrics_client_cpu_us_on": ("client CPU per entry, metrics on + scrapes", "us", None, False),
    "append_p50_ms": ("append, one in flight, p50", "ms", 0.5, False),
    "append_p99_ms": ("append, one in flight, p99", "ms", 1.5, False),
    "barrier_busy_p50_ms": ("read barrier, writer appending, p50", "ms", None, False),
    "barrier_busy_p99_ms": ("read barrier, writer appending, p99", "ms", None, False),
    "barrier_idle_p50_ms": ("read barrier just after an idle writer's ack, p50", "ms", None, False),
    "barrier_idle_p99_ms": ("read barrier just after an idle writer's ack, p99", "ms", None, False),
    "sync_append_p50_ms": ("append, one in flight, sync API, p50", "ms", None, False),
    "sync_append_p99_ms": ("append, one in flight, sync API, p99", "ms", None, False),
    "sync_append_extra_p50_ms": (
        "append, one in flight, sync API over asyncio, p50",
        "ms",
        0.05,
        False,
    ),
    "append_p999_ms": ("append, one in flight, p99.9", "ms", None, False),
    "tail_lag_p50_ms": ("tail lag writer->reader, p50", "ms", None, False),
    "tail_lag_p99_ms": ("tail lag writer->reader, p99", "ms", 3.0, False),
    "tail_ack_p50_ms": ("tail lag, part append -> ack, p50", "ms", None, False),
    "tail_ack_p99_ms": ("tail lag, part append -> ack, p99", "ms", None, False),
    "tail_after_ack_p50_ms": ("tail lag, part ack -> reader, p50", "ms", None, False),
    "tail_after_ack_p99_ms": ("tail lag, part ack -> reader, p99", "ms", None, False),
    "tail_journal_sync_max_ms": ("tail: slowest journal sync meanwhile", "ms", None, False),
    "tail_lag_checkpoint_p50_ms": ("tail lag while bookies checkpoint, p50", "ms", None, False),
    "tail_lag_checkpoint_p99_ms": ("tail lag while bookies checkpoint, p99", "ms", 3.0, False),
    "tail_lag_checkpoint_max_ms": ("tail lag while bookies checkpoint, max", "ms", None, False),
    "recovery_s": ("recovery of an open ledger (worst)", "s", 0.5, False),
    "bookie_restart_serving_s": ("bookie restart after SIGKILL: serving again", "s", 2.0, False),
    "bookie_restart_s": ("bookie restart after SIGKILL: registered again", "s", None, False),
    "bookie_restart_replay_s": ("bookie restart: journal replay", "s", None, False),
    "journal_replay_rate_mb_s": (
        "bookie restart: journal replayed / replay time",
        "MB/s",
        None,
        True,
    ),
    "journal_replay_mb_s": ("journal on disk / restart time", "MB/s", None, True),
    "spark_scan_mb_s": ("Spark batch scan, local[2]", "MB/s", 100.0, True),
    "spark_sink_mb_s": ("Spark batch sink (write + commit), local[2]", "MB/s", None, True),
    "spark_sink_standalone_mb_s": (
        "Spark batch sink (write + commit), standalone, 2 workers",
        "MB/s",
        None,
        True,
    ),
    "loopback6_append_eps": ("6 bookies on loopback: append, pipelined", "entries/s", None, True),
    "hosts_append_eps": ("6 bookies on 6 hosts: append, pipelined", "entries/s", None, True),
    "loopback6_append_p50_ms": ("6 bookies on loopback: one in flight, p50", "ms", None, False),
    "hosts_append_p50_ms": ("6 bookies on 6 hosts: one in flight, p50", "ms", None, False),
    "loopback6_append_p99_ms": ("6 bookies on loopback: one in flight, p99", "ms", None, False),
    "hosts_append_p99_ms": ("6 bookies on 6 hosts: one in flight, p99", "ms", None, False),
    "bookie_rss_growth_pct": ("soak: bookie memory, end vs after warm-up", "%", 10.0, False),
    "soak_entries_per_s": ("soak: appends through a log with retention", "entries/s", None, True),
    "soak_disk_peak_max_mib": ("soak: a bookie's disk use, peak", "MiB", None, False),
    "soak_bookies_lost": ("soak: bookies lost", "bookies", 0.0, False),
    "fsync_floor_us": ("floor: 4 KiB write+fdatasync, p50", "us", None, False),
    "grpc_rtt_p50_us": ("floor: grpc.aio stream round trip, 1 KiB, p50", "us", None, False),
    "grpc_fanout_p50_us": ("floor: 1 KiB to 3 grpc.aio echoes, 2nd answer, p50", "us", None, False),
    "quorum_floor_p50_us": ("floor: same, each syncing before it answers, p50", "us", None, False),
    "native_fanout_p50_us": ("floor: 1 KiB to 3 native echoes, 2nd answer, p50", "us", None, False),
    "native_quorum_floor_p50_us": ("floor: same, each syncing first, p50", "us", None, False),
    "unix_fanout_p50_us": ("floor: same over Unix sockets, 2nd answer, p50", "us", None, False),
    "unix_quorum_floor_p50_us": ("floor: same, each syncing first, p50", "us", None, False),
    "handover_floor_there_us": (
        "floor: a call handed to an idle event-loop thread, p50",
        "us",
        None,
        False,
    ),
    "handover_floor_back_us": (
        "floor: the answer back to the waiting thread, p50",
        "us",
        None,
        False,
    ),
    "etcd_put_ops": ("etcd 3 members, 1 KiB puts", "ops/s", None, True),
    "etcd_put_p50_ms": ("etcd put, one in flight, p50", "ms", None, False),
    "nats_r3_sync_ops": ("NATS R3 sync always, 1 KiB", "ops/s", None, True),
    "nats_p50_ms": ("NATS publish, one in flight, p50", "ms", None, False),
    "vs_nats_x": ("walog ledger append / NATS R3", "x", 3.0, True),
    "vs_etcd_x": ("walog ledger append / etcd", "x", 20.0, True),
}

KEPT_MARKER = "<!-- sections below are written by other benchmark commands -->"
"""Where a regenerated page keeps what follows from the previous one."""


def _verdict(value: float, target: float | None, higher: bool) -> str:
    if target is None:
        return ""
    met = value >= target if higher else value <= target
    return "met" if met else "MISSED"


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(label, value, unit, target, verdict) for every measured key, in a fixed order."""
    out = []
    for key, (label, unit, target, higher) in TARGETS.items():
        if key not in results:
            continue
        value = float(results[key])
        goal = "" if target is None else (">= " if higher else "<= ") + _fmt(target)
        out.append((label, _fmt(value), unit, goal, _verdict(value, target, higher)))
    return out


def print_table(results: dict[str, Any], out: IO[str]) -> None:
    """The results as an aligned text table."""
    table = rows(results)
    width = max((len(r[0]) for r in table), default=10)
    for label, value, unit, goal, verdict in table:
        print(f"{label:<{width}}  {value:>12} {unit:<10} {goal:<12} {verdict}", file=out)
    for name, reason in results.get("skipped", {}).items():
        print(f"{name:<{width}}  skipped: {reason}", file=out)


def plot(results: dict[str, Any], directory: Path) -> list[tuple[str, str]]:
    """Write the PNG plots; return (title, file name) pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, str]] = []

    bars = [
        (name, results[key])
        for name, key in (
            ("walog ledger\nPERSISTENT", "ledger_append_eps"),
            ("walog ledger\nVOLATILE", "ledger_append_volatile_eps"),
            ("walog ledger\nsync API", "sync_ledger_append_eps"),
            ("walog log\n100 B records", "log_append_rps"),
            ("NATS R3\nsync always", "nats_r3_sync_ops"),
            ("etcd\n3 members", "etcd_put_ops"),
        )
        if key in results
    ]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar([b[0] for b in bars], [b[1] for b in bars], color="#4c72b0")
    ax.set_yscale("log")
    ax.set_ylabel("operations / s (log scale)")
    ax.set_title("Throughput, 3 nodes on loopback, durable acknowledgements")
    for i, (_, value) in enumerate(bars):
        ax.text(i, value, f"{value:,.0f}", ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "bench-throughput.png", dpi=100)
    plt.close(fig)
    made.append(("Throughput", "bench-throughput.png"))

    nan = float("nan")  # a percentile the run did not measure: no bar
    groups = [
        (name, [results.get(f"{prefix}_{p}_ms", nan) for p in ("p50", "p99", "p999")])
        for name, prefix in (
            ("append, 1 in flight", "append"),
            ("tail lag", "tail_lag"),
            ("etcd put, 1 in flight", "etcd_put"),
            ("NATS publish, 1 in flight", "nats"),
        )
        if f"{prefix}_p50_ms" in results
    ]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.25
    for j, pct in enumerate(("p50", "p99", "p99.9")):
        xs = [i + (j - 1) * width for i in range(len(groups))]
        ax.bar(xs, [g[1][j] for g in groups], width, label=pct)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("milliseconds (log scale)")
    ax.set_title("Latency (HdrHistogram)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(directory / "bench-latency.png", dpi=100)
    plt.close(fig)
    made.append(("Latency", "bench-latency.png"))

    if results.get("recovery"):
        points = results["recovery"]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([p["entries"] for p in points], [p["seconds"] for p in points], "o-")
        ax.set_xscale("log")
        ax.set_xlabel("entries in the open ledger (log scale)")
        ax.set_ylabel("seconds to fence, recover and close")
        ax.set_ylim(bottom=0)
        ax.set_title("Recovery time vs ledger length")
        fig.tight_layout()
        fig.savefig(directory / "bench-recovery.png", dpi=100)
        plt.close(fig)
        made.append(("Recovery", "bench-recovery.png"))

    if results.get("grpc_echo_eps"):
        echo = results["grpc_echo_eps"]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([int(b) for b in echo], list(echo.values()), "o-", label="bare grpc.aio echo")
        ax.axhline(
            results["ledger_append_eps"],
            color="#c44e52",
            linestyle="--",
            label="walog ledger append (3 bookies)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("1 KiB entries per gRPC message")
        ax.set_ylabel("entries / s")
        ax.set_title("The RPC floor: per-message cost dominates")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(directory / "bench-rpc-floor.png", dpi=100)
        plt.close(fig)
        made.append(("RPC floor", "bench-rpc-floor.png"))
    return made


_SCENARIOS = """\
All scenarios run against a `walog.testing.LocalCluster`: three real bookie processes on
loopback with an SQLite metadata store, every ledger E=3, Qw=3, Qa=2, on this one machine
(client and bookies share its cores). Each scenario runs for a fixed wall-clock budget.
The ones that send one entry at a time (one in flight, tail lag) run first, while the
bookies have nothing to flush: the throughput scenarios leave hundreds of MB per bookie for
their checkpoints to write to the disk the journals sync on (a production bookie puts its
journal on a disk of its own, `--journal-dir`).

* **ledger append, pipelined** - 1 KiB entries, {ledger_window} appends in flight,
  `append_nowait` of the asyncio API; PERSISTENT (bookies acknowledge after the journal
  fdatasync) and VOLATILE (after the write).
* **sync API** - the same through `walog.connect(...)` (the event loop runs in a
  background thread): `append_many_async` with 64 entries a call, and `append_async` with
  one (the calls of a loop turn are handed over together; each entry has a future of its
  own, which the loop settles without a lock and which takes one only when a thread has to
  wait on it).
* **one in flight** - `await append()` one at a time: the latency of a durable append.
* **log append** - 100-byte records through a `LogWriter`, which packs the records appended
  in one event-loop turn into one entry; through the sync API too, with `append_many_async`
  ({log_batch} records a call) and with `append_async` (one a call).
* **tail lag** - a log writer appends one record, sleeps 1 ms, and again (the rate it reaches
  under load is `tail_records_per_s`), and a tailing `LogReader` in the same process (same
  clock) reads them. A record becomes readable once its entry is confirmed and the
  bookies learn the new last add confirmed, which travels on the writer's next entry (a
  writer this steady lets its next append carry it, `ClientConfig.lac_linger`) or in an
  explicit update once that append is overdue; the bookie of the reader's leading LAC watch
  then pushes the new LAC with the entry (its backup watch answers at most every 20 ms).
  So the lag is about one append round trip, up to one gap between appends, and two
  one-way messages.
* **tail lag while bookies checkpoint** - the same, after 40 MB of 1 KiB entries were
  written to every bookie's write cache, for 12 s: longer than the bookies' 10 s checkpoint
  interval, so each bookie writes those entries to its entry logs and index (on the disk
  its journal syncs on) while records are tailed. The bookies' checkpoint counters must
  show it, or the run is repeated (`walog.bench.checkpoint_tail`).
* **recovery** - an open ledger of N entries is fenced, recovered and closed by
  `open_ledger(recovery=True)` from a second client.
* **bookie restart** - after filling the bookies, one is SIGKILLed and restarted
  (`walog.bench.restart`). It *serves again* once its gRPC health service answers SERVING:
  the process started, the journal replayed, reads and adds of its ledgers answered. It is
  *registered again* once the new process's availability record is in the metadata store:
  before that it waits for its killed predecessor's record to expire with that process's
  session (up to 3 s after the kill with the local cluster's SQLite store), however fast it
  replayed. "journal replay" and its rate are the bookie's own figures (its
  `journal_replay_seconds` and `journal_replayed_bytes` metrics); "journal on disk" is the
  size of the journal files replay went through, as replay left them (cut at their last
  record), over the time to register again. `--restart-gib N` runs this scenario alone
  after N GiB of journal not yet checkpointed.
* **peers** (with `--peers`) - etcd 3.4 with three members (1 KiB puts, blocking Python client
  in a subprocess, 32 threads) and NATS JetStream 2.x with three servers, an R3 file stream
  and `sync_interval: always` (1 KiB publishes, {ledger_window} in flight), both on loopback;
  the floors are a 4 KiB write + fdatasync loop on the cluster's disk (into reserved space,
  as the journal writes) and a bare grpc.aio stream between two Python processes carrying
  1 KiB entries N to a message, and one 1 KiB message at a time (its round trip); the quorum
  floor sends one 1 KiB message at a time to three echo processes and waits for the second
  answer, bare and with each process appending it to a file and fdatasyncing before it
  answers, over grpc.aio and over the native port's frames (walog's own client calls) on TCP
  and on Unix sockets (what walog uses for bookies on its own host, as here). The
  peers need `apt-get install -y etcd-server` and `pip install 'walog[peers]'`; a missing one
  is reported as skipped.

The report can be re-rendered from its JSON without measuring again:
`walog bench --from-json docs/benchmarks.json --report docs/benchmarks.md` (the command line
at the top stays the one that measured).
"""


def write_report(results: dict[str, Any], path: Path) -> None:
    """Write ``path`` (Markdown), its plots under ``img/`` and the JSON next to it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    made = plot(results, path.parent / "img")
    json_path = path.with_suffix(".json")
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    machine = results["machine"]
    load = ", ".join(str(x) for x in machine["load_average_at_start"])
    idle = f", idle CPUs: {machine['cpu_idle']}" if machine.get("cpu_idle") else ""
    lines = [
        "# Benchmarks",
        "",
        "This page is generated; every number on it was measured by the command below.",
        "Regenerate it with the same command (results vary with the machine and its load).",
        "",
        "```",
        results["command"],
        "```",
        "",
        f"Run {results['started_utc']} UTC, {results['wall_s']} s wall time, "
        f"{results['seconds_per_scenario']} s per scenario. Machine: {machine['cpus']} CPUs, "
        f"load average at start {load} (1, 5, 15 min), Python {machine['python']}, "
        f"{machine['platform']}{idle}. Raw results: [`{json_path.name}`]({json_path.name}).",
        "",
    ]
    busy = machine["load_average_at_start"][0]
    if machine["cpus"] and busy > machine["cpus"]:
        lines += [
            f"The machine was busy with other work: a load average of {busy} on "
            f"{machine['cpus']} CPUs means a runnable process got roughly "
            f"{100 * machine['cpus'] / busy:.0f} % of a CPU. Throughput and tail latencies "
            "below are lower than on an idle machine; the CPU cost per operation "
            "(further down) depends much less on it.",
            "",
        ]
    lines += [
        "## Results",
        "",
        "| measurement | value | unit | target | |",
        "|---|---:|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows(results)]
    for name, reason in results.get("skipped", {}).items():
        lines.append(f"| {name} | skipped | | | {reason} |")
    lines += ["", "## Plots", ""]
    lines += [f"![{title}](img/{name})\n" for title, name in made]
    if results.get("recovery"):
        lines += ["## Recovery time by ledger length", "", "| entries | seconds |", "|---:|---:|"]
        lines += [f"| {p['entries']:,} | {p['seconds']:.3f} |" for p in results["recovery"]]
        lines.append("")
    if results.get("grpc_echo_eps"):
        lines += ["## RPC floor", "", "| 1 KiB entries per message | entries/s |", "|---:|---:|"]
        lines += [f"| {b} | {v:,} |" for b, v in results["grpc_echo_eps"].items()]
        lines.append("")
    lines += cpu_section(results)
    lines += floor_section(results, TARGETS["append_p50_ms"][2])
    lines += saturation_section(results)
    lines += hosts_section(results)
    config = {"ledger_window": "?", "log_batch": "?", **results.get("config", {})}
    lines += ["## Scenarios", "", _SCENARIOS.format(**config)]
    if results.get("profile"):
        lines += profile_section(results)
    text = "\n".join(lines).rstrip() + "\n"
    if path.exists():
        # Sections other benchmark commands wrote (benchmarks/statemachine.py) stay.
        _, marker, kept = path.read_text().partition(KEPT_MARKER)
        if marker:
            text += "\n" + marker + kept
    path.write_text(text)

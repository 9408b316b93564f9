"""The explanatory sections of the benchmark report: CPU per operation, one append in
flight against the floors, saturation of the tail scenario, and the profiles."""

from __future__ import annotations

from typing import Any

from walog.latency import STAGE_LABELS

PROFILE_HELP = """\
py-spy sampled the benchmark process (the client) and the three bookies at 200 Hz during
separate runs of the pipelined PERSISTENT ledger append and of the log append (the numbers
in the results table come from runs without the profiler attached). "Self" time is charged
to the innermost Python frame of each sample; the area is the innermost frame that belongs to
a known area, so time inside a C extension (gRPC core, protobuf, crc32c, lmdb, the fdatasync
system call) is charged to the Python code that called it. Idle threads and samples
waiting in `select` or on a lock are left out.
"""


def cpu_section(results: dict[str, Any]) -> list[str]:
    per_entry: dict[str, float] = results.get("cpu_us_per_entry", {})
    per_record: dict[str, float] = results.get("cpu_us_per_record", {})
    if not per_entry:
        return []
    lines = [
        "## CPU per operation",
        "",
        "CPU time (user + system, all threads, from `/proc`) each process used during the",
        "measured runs, divided by the operations completed.",
        "",
        "| process | us CPU per 1 KiB ledger entry | us CPU per 100 B log record |",
        "|---|---:|---:|",
    ]
    for name, value in per_entry.items():
        record = per_record.get(name)
        lines.append(f"| {name} | {value:.1f} | {'' if record is None else f'{record:.2f}'} |")
    total = sum(per_entry.values())
    total_record = sum(per_record.values())
    lines.append(f"| **all** | **{total:.1f}** | **{total_record:.2f}** |")
    cpus = results["machine"]["cpus"] or 1
    if total > 0:
        lines += [
            "",
            f"Together the client and the bookies spent {total:.1f} us of CPU per replicated "
            f"entry, so {cpus} CPUs running nothing else would cap the pipelined ledger append "
            f"at about {cpus * 1e6 / total:,.0f} entries/s; the bookies' share is "
            f"{100 * (total - per_entry.get('client', 0.0)) / total:.0f} % (each entry is "
            "written to all three, Qw=3).",
        ]
    lines += _thread_lines(results.get("cpu_us_per_entry_by_thread", {}))
    lines.append("")
    return lines


def floor_section(results: dict[str, Any], target_ms: float | None) -> list[str]:
    """One append in flight against the floors measured in the same run (and its p50
    target): the journal sync, and the quorum exchange over both transports."""
    if "append_p50_ms" not in results or "fsync_floor_us" not in results:
        return []
    p50 = float(results["append_p50_ms"])
    sync = float(results["fsync_floor_us"]) / 1000.0
    lines = [
        "## One append in flight against the floors",
        "",
        "A durable append needs at least one round trip to the bookies and one journal sync "
        f"(4 KiB write + fdatasync: {sync:.3f} ms, p50). With E=3, Qw=3, Qa=2 the writer sends "
        "each entry to three processes and waits for the second answer. The same exchange "
        "with no bookie logic at all - three echo processes, one 1 KiB message in flight, "
        "timed to the second answer - takes (ms, p50):",
        "",
        "| transport | echo answers at once | echo appends + fdatasyncs, then answers |",
        "|---|---:|---:|",
    ]
    floor = None
    for name, bare_key, synced_key in (
        ("grpc.aio", "grpc_fanout_p50_us", "quorum_floor_p50_us"),
        ("native frames over TCP", "native_fanout_p50_us", "native_quorum_floor_p50_us"),
        (
            "native frames over Unix sockets (walog's default on one host)",
            "unix_fanout_p50_us",
            "unix_quorum_floor_p50_us",
        ),
    ):
        if bare_key in results and synced_key in results:
            floor = float(results[synced_key]) / 1000.0
            bare = float(results[bare_key]) / 1000.0
            lines.append(f"| {name} | {bare:.3f} | {floor:.3f} |")
    if floor is None:
        return lines[:2] + _stage_lines(results.get("append_stages", {}), p50)
    text = (
        f"The last figure, {floor:.3f} ms, is the least an E3/Qw3/Qa2 PERSISTENT append in "
        f"flight can take with Python on this transport and machine. walog's append took "
        f"{p50:.3f} ms (p50), {p50 - floor:.3f} ms above it: the writer's and the bookies' own "
        "path (packing and sending the batch, the bookie's add stream, the hand-over to the "
        "journal thread and back)."
    )
    if target_ms is not None and floor > target_ms:
        text += f" The {target_ms:g} ms target lies below this floor."
    if "etcd_put_p50_ms" in results and "nats_p50_ms" in results:
        text += (
            f" In the same run one etcd put in flight took {results['etcd_put_p50_ms']:.2f}"
            f" ms and one NATS R3 publish {results['nats_p50_ms']:.2f} ms (p50)."
        )
    lines += ["", text, ""]
    return lines + _stage_lines(results.get("append_stages", {}), p50)


def _stage_lines(stages: dict[str, dict[str, float]], p50_ms: float) -> list[str]:
    """The bookies' share of one append in flight, by stage (their ``Info`` histograms)."""
    if "add" not in stages:
        return []
    lines = [
        "Inside the bookies, from the stage histograms they report (`Info`; the three "
        "bookies' adds pooled, each value to within 19 %):",
        "",
        "| stage | p50 ms | p99 ms |",
        "|---|---:|---:|",
    ]
    for stage, name in STAGE_LABELS.items():
        if stage in stages:
            value = stages[stage]
            lines.append(
                f"| {name} | {value['p50_us'] / 1000:.3f} | {value['p99_us'] / 1000:.3f} |"
            )
    outside = p50_ms - stages["add"]["p50_us"] / 1000
    lines += [
        "",
        f"The remaining {outside:.3f} ms of the p50 is outside the bookies' add handling: "
        "the writer, the native framing on both sides, the sockets both ways, and each "
        "process waiting for one of the two cores.",
        "",
    ]
    return lines


def _thread_lines(by_thread: dict[str, dict[str, float]]) -> list[str]:
    """The pipelined ledger append's CPU per entry split by thread (``main`` runs the event
    loop: the transport and the protocol; a bookie's ``bookie-journal`` writes and syncs the
    journal, ``bookie-storage`` writes checkpoints; ``event_engine`` threads are gRPC's own)."""
    if not by_thread:
        return []
    lines = [
        "",
        "The same ledger-append CPU by thread (`/proc/PID/task`; `main` runs the event loop:",
        "the transport and the protocol code; `bookie-journal` writes and fdatasyncs the",
        "journal; `bookie-storage` writes checkpoints; `event_engine` threads are gRPC's own,",
        "busy only where a call still goes over gRPC):",
        "",
        "| process | thread | us CPU per entry |",
        "|---|---|---:|",
    ]
    for process, threads in by_thread.items():
        for thread, value in sorted(threads.items(), key=lambda item: -item[1]):
            if value >= 0.05:
                lines.append(f"| {process} | {thread} | {value:.2f} |")
    return lines


def profile_section(results: dict[str, Any]) -> list[str]:
    lines = ["## Where the time goes", "", PROFILE_HELP]
    for proc in results.get("profile", []):
        lines += [f"### {proc['process']} ({proc['samples']} samples)", ""]
        lines += ["| area | share of samples |", "|---|---:|"]
        lines += [f"| {name} | {share:.1f} % |" for name, share in proc["by_area"]]
        lines += ["", "| hottest functions (self time) | share |", "|---|---:|"]
        lines += [f"| `{name}` | {share:.1f} % |" for name, share in proc["by_function"]]
        lines.append("")
    return lines


def _us(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def saturation_section(results: dict[str, Any]) -> list[str]:
    """CPU per entry that travels alone (one in flight, the tail scenario) against the
    quorum floor's, and how busy the tail scenario's rate keeps the machine."""
    append: dict[str, float] = results.get("cpu_us_per_append", {})
    tail: dict[str, float] = results.get("cpu_us_per_tail_record", {})
    if not append and not tail:
        return []
    lines = [
        "## Entries that travel alone: CPU and saturation",
        "",
        "An entry appended on its own - one append in flight, or the tail scenario's record "
        "after each 1 ms pause - shares no message, journal sync or event-loop turn with "
        "others, so each pays the full price per message in the client and in the three "
        "bookies. CPU per entry (user + system, all threads, from `/proc`; each scenario's "
        "set-up included):",
        "",
        "| process | us CPU per append, one in flight | us CPU per tail record |",
        "|---|---:|---:|",
    ]
    for name in dict.fromkeys([*append, *tail]):
        lines.append(f"| {name} | {_us(append.get(name))} | {_us(tail.get(name))} |")
    append_total, tail_total = sum(append.values()), sum(tail.values())
    lines.append(f"| **all** | **{_us(append_total)}** | **{_us(tail_total)}** |")
    floor = (
        results.get("unix_quorum_floor_cpu_us")
        or results.get("native_quorum_floor_cpu_us")
        or results.get("quorum_floor_cpu_us")
    )
    if floor:
        lines.append(f"| quorum floor: client + 3 syncing echo processes | {floor:.0f} | |")
    lines.append("")
    rate = results.get("tail_records_per_s")
    cpus = results["machine"]["cpus"] or 1
    if rate and tail_total:
        busy = 100 * tail_total * rate / 1e6 / cpus
        text = (
            f"At the tail scenario's {rate:,} records/s, {tail_total:.0f} us per record keep "
            f"{busy:.0f} % of the {cpus} CPUs busy"
        )
        if floor:
            text += (
                f"; the quorum floor's {floor:.0f} us per round would keep "
                f"{100 * floor * rate / 1e6 / cpus:.0f} % busy on its own, before any "
                "reader"
            )
        text += (
            ". Each message waits behind others in every process and thread it passes, "
            "more often the busier the cores (a four-process pipeline on two cores), and "
            "that queueing, not one slow step, is much of the tail lag"
        )
        if "tail_ack_p50_ms" in results and "append_p50_ms" in results:
            text += (
                f": the tail's append -> ack part alone takes {results['tail_ack_p50_ms']:.2f}"
                f" ms (p50) where one append in flight takes {results['append_p50_ms']:.2f} ms"
            )
        lines += [text + ".", ""]
    slowest = results.get("tail_journal_sync_max_ms")
    if slowest is not None:
        lines += [
            f"The slowest journal sync during the tail scenario took {slowest:g} ms; "
            f"{results.get('tail_journal_syncs_over_20ms', 0)} syncs (summed over the "
            "bookies) took about 20 ms or more. The three bookies share one disk, whose "
            "occasional stalls (a bare fdatasync loop on this machine shows them too) hold "
            "up every bookie at once, and with them every record written meanwhile: one "
            "such stall in the run is enough to set the tail's p99.",
            "",
        ]
    return lines


def hosts_section(results: dict[str, Any]) -> list[str]:
    """Appends between hosts next to the same on loopback (the ``hosts`` scenario)."""
    if "hosts_append_eps" not in results or "loopback6_append_eps" not in results:
        return []
    rows = [
        ("append, pipelined (entries/s)", "append_eps", "{:,.0f}"),
        ("one in flight, p50 (ms)", "append_p50_ms", "{:.3g}"),
        ("one in flight, p99 (ms)", "append_p99_ms", "{:.3g}"),
    ]
    lines = [
        "## Between hosts",
        "",
        "Six bookies over three racks, E3/Qw3/Qa2, 1 KiB entries, the client in a process "
        "of its own. *Loopback*: every bookie on 127.0.0.1 (SQLite metadata; the client "
        "reaches the bookies through their Unix sockets). *Hosts*: each bookie in a network "
        "namespace of its own with its own address, joined by veth pairs and a bridge, a "
        "three-node ZooKeeper ensemble, the client on a client host, over TCP "
        "(`walog.testing.HostCluster`). Both share this machine's cores: the difference is "
        "the network path. No latency is added between hosts.",
        "",
        "| | loopback | hosts |",
        "|---|---:|---:|",
    ]
    for label, key, fmt in rows:
        local, hosts = results.get(f"loopback6_{key}"), results.get(f"hosts_{key}")
        if local is not None and hosts is not None:
            lines.append(f"| {label} | {fmt.format(local)} | {fmt.format(hosts)} |")
    return [*lines, ""]

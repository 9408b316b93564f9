"""Benchmark of the state-machine recipe (walog.recipes): commands per second through a
leader, one-command latency through the sync API, and takeover time after the leader is
SIGKILLed (examples/kvstore processes). Runs on a LocalCluster (3 bookies, SQLite
metadata) in well under a minute::

    python benchmarks/statemachine.py [--report docs/benchmarks.md] [--seconds 5]

With ``--report`` the results replace the "State-machine recipe" section of the page
(kept when ``walog bench --report`` regenerates the rest).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import walog
import walog.aio
from walog.bench.report import KEPT_MARKER
from walog.log.position import Position, Record
from walog.recipes import AsyncStateMachine, Role, StateMachine
from walog.testing import LocalCluster

REPO = Path(__file__).resolve().parent.parent
SECTION = "## State-machine recipe"
WINDOW = 256


class Counter:
    """The smallest service: counts records (the recipe's own cost dominates)."""

    def __init__(self) -> None:
        self.count = 0

    def apply(self, record: Record) -> int:
        self.count += 1
        return self.count

    def snapshot(self) -> bytes:
        return str(self.count).encode()

    def restore(self, data: IO[bytes], position: Position) -> None:
        self.count = int(data.read())


async def throughput(uri: str, seconds: float) -> dict[str, float]:
    """Commands/s through a leader with WINDOW commands in flight, and a standby's lag."""
    async with (
        await walog.aio.connect(uri) as lead_client,
        await walog.aio.connect(uri) as standby_client,
    ):
        log = await lead_client.open_log("bench-sm", roll_policy=walog.RollPolicy(max_entries=5000))
        leader = AsyncStateMachine(log, Counter(), node_id="a")
        await leader.start()
        await leader.wait_for(lambda: leader.role is Role.LEADER, 30)
        standby_state = Counter()
        standby_log = await standby_client.open_log("bench-sm")
        standby = AsyncStateMachine(standby_log, standby_state, node_id="b")
        await standby.start()
        payload = b"x" * 100
        done = 0
        inflight: set[asyncio.Future[Any]] = set()
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            while len(inflight) < WINDOW:
                inflight.add(asyncio.ensure_future(leader.submit(payload)))
            finished, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            done += len(finished)
        if inflight:
            finished, _ = await asyncio.wait(inflight)
            done += len(finished)
        elapsed = time.perf_counter() - start
        total = done
        caught = time.perf_counter()
        await standby.wait_for(lambda: standby_state.count >= total, 60)
        behind = time.perf_counter() - caught
        await standby.close()
        await leader.close()
    return {
        "commands_per_s": round(done / elapsed),
        "standby_behind_at_end_s": round(behind, 3),
    }


def sync_latency(uri: str, seconds: float) -> dict[str, float]:
    """One command at a time through the sync API: latency percentiles."""
    with walog.connect(uri) as client:
        log = client.open_log("bench-sm-sync")
        with StateMachine(log, Counter(), node_id="a") as machine:
            machine.start()
            machine.wait_leader(30)
            samples: list[float] = []
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                begun = time.perf_counter()
                machine.execute(b"x" * 100)
                samples.append(time.perf_counter() - begun)
    samples.sort()
    return {
        "sync_commands_per_s": round(len(samples) / sum(samples)),
        "sync_p50_ms": round(1000 * samples[len(samples) // 2], 3),
        "sync_p99_ms": round(1000 * samples[int(len(samples) * 0.99)], 3),
    }


def _node(uri: str, node: str, port: int) -> subprocess.Popen[str]:
    server = REPO / "examples" / "kvstore" / "server.py"
    proc = subprocess.Popen(
        [
            *(sys.executable, str(server), "--metadata", uri, "--log", "bench-kv"),
            *("--listen", f"127.0.0.1:{port}", "--node", node),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "standby": serving
    return proc


def _ask(port: int, line: str) -> str:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(line.encode() + b"\n")
            return sock.makefile().readline().strip()
    except OSError:
        return ""


def takeover(uri: str, rounds: int, session_timeout: float) -> dict[str, float]:
    """SIGKILL the leader of two kvstore processes; time until the other acknowledges a PUT."""
    from walog.testing import free_port

    node_uri = f"{uri}?session_timeout={session_timeout}&heartbeat={session_timeout / 5}"
    ports = {"a": free_port(), "b": free_port()}
    procs = {name: _node(node_uri, name, p) for name, p in ports.items()}
    times: list[float] = []
    try:
        for i in range(rounds):
            while True:
                leaders = [n for n, p in ports.items() if _ask(p, "ROLE") == "LEADER"]
                if leaders and _ask(ports[leaders[0]], f"PUT warm{i} {i}").startswith("OK"):
                    break
                time.sleep(0.02)  # a new leader still catching up: ask again
            old = leaders[0]
            other = "b" if old == "a" else "a"
            killed = time.perf_counter()
            os.kill(procs[old].pid, signal.SIGKILL)
            procs[old].wait()
            while not _ask(ports[other], f"PUT after{i} {i}").startswith("OK"):
                time.sleep(0.01)  # not serving yet: the time measured is until it does
            times.append(time.perf_counter() - killed)
            procs[old] = _node(node_uri, old, ports[old])
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    return {
        "takeover_session_timeout_s": session_timeout,
        "takeover_p50_s": round(statistics.median(times), 3),
        "takeover_max_s": round(max(times), 3),
        "takeover_rounds": rounds,
    }


def section(results: dict[str, Any], command: str) -> str:
    """The page section for ``results``."""
    r = results
    return "\n".join(
        [
            SECTION,
            "",
            f"Measured by `{command}` on {r['started_utc']} UTC",
            "(LocalCluster: 3 bookies, SQLite metadata, ledgers E=3 Qw=3 Qa=2, PERSISTENT).",
            "A command is 100 bytes; the service only counts, so the numbers are the recipe's",
            f"own cost. Load average at start {r['load_average_at_start']} on {r['cpus']} CPUs:",
            "other work on the machine lowers the throughput.",
            "",
            "| measurement | value | unit |",
            "|---|---:|---|",
            f"| commands through the leader, {WINDOW} in flight | {r['commands_per_s']:,} "
            "| commands/s |",
            f"| standby still behind when the leader's last command was applied "
            f"| {r['standby_behind_at_end_s']} | s |",
            f"| sync API, one command at a time | {r['sync_commands_per_s']:,} | commands/s |",
            f"| sync API, one command at a time, p50 | {r['sync_p50_ms']} | ms |",
            f"| sync API, one command at a time, p99 | {r['sync_p99_ms']} | ms |",
            f"| takeover, leader SIGKILLed -> new leader acknowledges, p50 of "
            f"{r['takeover_rounds']} | {r['takeover_p50_s']} | s |",
            f"| takeover, worst of {r['takeover_rounds']} | {r['takeover_max_s']} | s |",
            "",
            "The takeover is dominated by the metadata session timeout "
            f"({r['takeover_session_timeout_s']} s here):",
            "the dead leader's election record must expire before a standby wins; fencing,",
            "recovery of the last two ledgers and catching up take the rest. Shorter sessions",
            "fail over faster and risk a leader change on a long pause.",
            "",
        ]
    )


def write_section(path: Path, text: str) -> None:
    """Replace (or add) the section after the page's kept-sections marker."""
    page = path.read_text() if path.exists() else ""
    if KEPT_MARKER not in page:
        page = page.rstrip() + "\n\n" + KEPT_MARKER + "\n"
    head, _, kept = page.partition(KEPT_MARKER)
    if SECTION in kept:
        before, _, after = kept.partition(SECTION)
        rest = after.split("\n## ", 1)
        kept = before + (("## " + rest[1]) if len(rest) > 1 else "")
    others = kept.strip("\n")
    path.write_text(head + KEPT_MARKER + "\n\n" + (others + "\n\n" if others else "") + text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per throughput scenario")
    parser.add_argument("--rounds", type=int, default=5, help="takeovers measured")
    parser.add_argument("--session-timeout", type=float, default=1.5)
    parser.add_argument("--report", type=Path, help="write the section into this page")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    with LocalCluster(bookies=3, metadata="sqlite") as cluster:
        results.update(asyncio.run(throughput(cluster.metadata_uri, args.seconds)))
        results.update(sync_latency(cluster.metadata_uri, args.seconds / 2))
        results.update(takeover(cluster.metadata_uri, args.rounds, args.session_timeout))
    print(json.dumps(results))
    if args.report:
        command = "python benchmarks/statemachine.py --report " + str(args.report)
        write_section(args.report, section(results, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The benchmark harness: result keys, profile folding, report rendering (no timing checks)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from walog._loop_thread import name_os_thread
from walog.bench import floors, main
from walog.bench.echo_server import METHOD
from walog.bench.profile import summarise
from walog.bench.report import print_table, rows, write_report
from walog.bench.soak import Soak
from walog.bench.stats import Latency, payload, thread_cpu_seconds

CONTRACT_KEYS = {
    "ledger_append_eps",
    "log_append_rps",
    "append_p50_ms",
    "append_p99_ms",
    "tail_lag_p99_ms",
    "recovery_s",
    "sync_log_append_rps",
    "sync_log_append_single_rps",
    "sync_ledger_append_eps",
    "cpu_us_per_entry",
    "cpu_us_per_entry_total",
    "writer_peak_rss_mib_100k_in_flight",
}


@pytest.mark.slow  # a whole quick benchmark run: half a minute
def test_quick_json_run_prints_contract_keys_as_last_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status = main(
        [
            "--quick",
            "--json",
            "--seconds",
            "0.3",
            "--no-progress",
            "--output",
            str(tmp_path / "r.json"),
        ]
    )
    assert status == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    results = json.loads(last)
    assert results.keys() >= CONTRACT_KEYS
    assert results["ledger_append_eps"] > 0 and results["log_append_rps"] > 0
    assert results["metrics_off_eps"] > 0 and results["metrics_on_eps"] > 0
    assert results["metrics_client_cpu_us_on"] > 0 and "metrics_overhead_pct" in results
    assert "sync_append_extra_p50_ms" in results
    assert results["handover_floor_there_us"] > 0 and results["handover_floor_back_us"] > 0
    assert [p["entries"] for p in results["recovery"]] == [10, 100]
    assert json.loads((tmp_path / "r.json").read_text())["recovery_s"] == results["recovery_s"]


def test_latency_percentiles_come_from_the_histogram() -> None:
    latency = Latency()
    for ms in range(1, 101):
        latency.record(ms / 1000)
    summary = latency.summary()
    assert summary["count"] == 100
    assert summary["p50_ms"] == pytest.approx(50, rel=0.01)
    assert summary["p99_ms"] == pytest.approx(99, rel=0.01)
    assert Latency().percentile_ms(50) == 0.0


def test_payload_has_the_requested_size_and_is_not_constant() -> None:
    assert len(payload(1024)) == 1024 and len(set(payload(1024))) > 100
    with pytest.raises(ValueError, match="payload size"):
        payload(-1)


def test_profile_charges_self_time_to_the_innermost_frame() -> None:
    lines = [
        "process 1:python;thread (0x1);run (asyncio/base_events.py:600);"
        "_send (walog/ledger/writer.py:260);write (grpc/aio/_call.py:10) 3",
        "process 1:python;thread (0x1);run (asyncio/base_events.py:600) 1",
        "process 1:python;thread (0x1);run (asyncio/base_events.py:600);"
        "EpollSelector.select (/usr/lib/python3.11/selectors.py:468) 5",
        "garbage line",
    ]
    profile = summarise("client", lines)
    assert profile.samples == 4
    assert profile.by_function[0] == ("write (grpc/aio/_call.py)", 75.0)
    assert dict(profile.by_area) == {"grpc (Cython + C core)": 75.0, "asyncio event loop": 25.0}


def _results() -> dict[str, Any]:
    return {
        "ledger_append_eps": 130_000,
        "log_append_rps": 100_000,
        "append_p50_ms": 0.5,
        "append_p99_ms": 4.0,
        "append_p999_ms": 6.0,
        "tail_lag_p50_ms": 1.0,
        "tail_lag_p99_ms": 2.0,
        "tail_lag_p999_ms": 3.0,
        "recovery_s": 0.2,
        "recovery": [{"entries": 10, "seconds": 0.1}, {"entries": 100, "seconds": 0.2}],
        "grpc_echo_eps": {"1": 5000, "10": 40000},
        "grpc_rtt_p50_us": 150.0,
        "fsync_floor_us": 200.0,
        "append_stages": {
            "journal_sync": {"p50_us": 210.0, "p99_us": 400.0},
            "add": {"p50_us": 300.0, "p99_us": 900.0},
        },
        "skipped": {"etcd": "etcd is not installed"},
        "command": "walog bench --quick",
        "started_utc": "2026-01-01 00:00:00",
        "wall_s": 1.0,
        "seconds_per_scenario": 0.3,
        "machine": {
            "cpus": 2,
            "load_average_at_start": [1.0, 1.0, 1.0],
            "python": "3.11",
            "platform": "Linux",
            "cpu_idle": "cpuidle haltpoll, guest_halt_poll_ns 0",
        },
        "profile": [
            {
                "process": "client",
                "samples": 4,
                "by_area": [["grpc", 75.0]],
                "by_function": [["write (grpc/aio/_call.py)", 75.0]],
            }
        ],
    }


def test_targets_are_judged_in_their_direction() -> None:
    verdicts = {label: verdict for label, _, _, _, verdict in rows(_results())}
    assert verdicts["ledger append, PERSISTENT, pipelined"] == "met"
    assert verdicts["log append, 100 B records"] == "MISSED"
    assert verdicts["append, one in flight, p50"] == "met"
    assert verdicts["append, one in flight, p99"] == "MISSED"
    out = io.StringIO()
    print_table(_results(), out)
    assert "skipped: etcd is not installed" in out.getvalue()


def test_report_writes_markdown_plots_and_json(tmp_path: Path) -> None:
    report = tmp_path / "docs" / "benchmarks.md"
    write_report(_results(), report)
    text = report.read_text()
    assert "walog bench --quick" in text and "| 100 | 0.200 |" in text
    assert "| journal fdatasync | 0.210 | 0.400 |" in text
    assert "Linux, idle CPUs: cpuidle haltpoll, guest_halt_poll_ns 0." in text
    assert "The remaining 0.200 ms of the p50 is outside the bookies' add handling" in text
    for name in ("bench-throughput.png", "bench-latency.png", "bench-recovery.png"):
        assert (tmp_path / "docs" / "img" / name).stat().st_size > 0
        assert f"img/{name}" in text
    assert json.loads((tmp_path / "docs" / "benchmarks.json").read_text())["recovery_s"] == 0.2


def test_only_runs_the_chosen_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--quick", "--json", "--seconds", "0.3", "--no-progress", "--only", "latency"])
    assert status == 0
    results = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert results["append_p50_ms"] > 0 and results["append_latency_samples"] > 0
    stages = results["append_stages"]
    assert stages.keys() >= {"journal_queue", "journal_sync", "add"}
    assert stages["add"]["p50_us"] >= stages["journal_sync"]["p50_us"] > 0
    assert not results.keys() & {"ledger_append_eps", "tail_lag_p99_ms", "recovery_s"}
    assert "bookie_restart_s" not in results


def test_only_rejects_an_unknown_scenario_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--only", "latency,bogus"])
    assert (
        "unknown scenario bogus; choose from latency, tail, checkpoint, ledger"
        in capsys.readouterr().err
    )


def test_thread_cpu_is_split_by_os_thread_name() -> None:
    stop = threading.Event()

    def spin() -> None:
        name_os_thread()
        while not stop.is_set():
            sum(range(1000))

    worker = threading.Thread(target=spin, name="bench-spin_0")
    worker.start()
    try:
        seconds: dict[str, float] = {}
        while seconds.get("bench-spin", 0.0) < 0.2:  # until the spinner shows CPU time
            seconds = thread_cpu_seconds(os.getpid())
    finally:
        stop.set()
        worker.join()
    assert "main" in seconds and seconds["bench-spin"] >= 0.2


def test_report_sets_one_append_in_flight_against_the_quorum_floor(tmp_path: Path) -> None:
    results = {**_results(), "grpc_fanout_p50_us": 600.0, "quorum_floor_p50_us": 1100.0}
    results |= {"native_fanout_p50_us": 400.0, "native_quorum_floor_p50_us": 950.0}
    results |= {"unix_fanout_p50_us": 350.0, "unix_quorum_floor_p50_us": 900.0}
    results |= {"append_p50_ms": 1.2, "etcd_put_p50_ms": 1.5, "nats_p50_ms": 1.4}
    report = tmp_path / "benchmarks.md"
    write_report(results, report)
    text = " ".join(report.read_text().split())
    assert "| grpc.aio | 0.600 | 1.100 |" in text
    assert "| native frames over TCP | 0.400 | 0.950 |" in text
    assert (
        "| native frames over Unix sockets (walog's default on one host) | 0.350 | 0.900 |" in text
    )
    assert "walog's append took 1.200 ms (p50), 0.300 ms above it" in text
    assert "The 0.5 ms target lies below this floor." in text
    assert "one etcd put in flight took 1.50 ms and one NATS R3 publish 1.40 ms" in text
    results["unix_quorum_floor_p50_us"] = 450.0
    write_report(results, report)
    assert "lies below this floor" not in report.read_text()


@pytest.mark.parametrize("transport", ["grpc", "native", "unix"])
def test_quorum_floor_times_the_second_answer_and_leaves_no_sync_files(
    tmp_path: Path, transport: str
) -> None:
    floor = floors.quorum_floor(0.3, tmp_path, transport=transport)
    assert floor.bare.count > 0 and floor.synced.count > 0 and floor.cpu_s_per_round > 0
    assert list(tmp_path.iterdir()) == []


def test_thread_handover_floor_times_both_wake_ups_of_every_call() -> None:
    there, back = floors.thread_handover_floor(200)
    assert there.count == back.count == 200
    assert 0 < there.percentile_ms(50.0) < 50 and 0 < back.percentile_ms(50.0) < 50


def test_syncing_echo_server_writes_every_message_before_answering(tmp_path: Path) -> None:
    async def exchange(target: str) -> bytes:
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.stream_stream(METHOD, None, None)(None)
            await call.write(payload(1024))
            answer = await call.read()
            assert isinstance(answer, bytes)
            await call.done_writing()
            return answer

    with floors._echo_servers(1, tmp_path) as ((target,), _):
        assert asyncio.run(exchange(target)) == (1024).to_bytes(4, "little")
        # The server still runs: what its file holds was written before the answer.
        (sync_file,) = tmp_path.glob("*.sync")
        assert sync_file.read_bytes()[:1025] == payload(1024) + b"\0"


def test_report_weighs_the_tail_rate_against_the_cpu_per_record(tmp_path: Path) -> None:
    results = {
        **_results(),
        "cpu_us_per_append": {"client": 600.0, "bookie-0": 500.0},
        "cpu_us_per_tail_record": {"client": 500.0, "bookie-0": 400.0},
        "tail_records_per_s": 1000,
        "quorum_floor_cpu_us": 700.0,
        "tail_ack_p50_ms": 3.0,
        "tail_journal_sync_max_ms": 181.0,
        "tail_journal_syncs_over_20ms": 3,
    }
    report = tmp_path / "benchmarks.md"
    write_report(results, report)
    text = " ".join(report.read_text().split())
    assert "| **all** | **1100** | **900** |" in text
    assert "900 us per record keep 45 % of the 2 CPUs busy" in text
    assert "the quorum floor's 700 us per round would keep 35 % busy" in text
    assert "The slowest journal sync during the tail scenario took 181 ms; 3 syncs" in text


def test_soak_growth_compares_the_mean_after_the_warm_up_with_the_mean_at_the_end() -> None:
    memory = [50.0, 100.0, 150.0, 250.0, 170.0, 190.0, 180.0, 200.0]  # private MiB
    samples = [(10.0 * i, {"b": (m, 10.0)}) for i, m in enumerate(memory)]
    soak = Soak(seconds=70.0, entries=10, samples=samples, warmup=20.0, window=20.0)
    assert soak.baseline() == {"b": (((150 + 250 + 170) / 3), 10.0)}  # 20 s to 40 s
    assert soak.end() == {"b": (((190 + 180 + 200) / 3), 10.0)}  # the last 20 s
    assert soak.growth_pct() == {"b": 0.0}


def test_soak_needs_a_positive_number_of_minutes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--soak", "0"])
    assert exited.value.code == 2
    assert "--soak must be > 0 minutes" in capsys.readouterr().err

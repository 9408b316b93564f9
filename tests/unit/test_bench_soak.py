"""The soak's rules (walog.bench.soak, walog.bench.soak_watch): its rate option, the disk
table, what fails a run (no timing checks)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from walog.bench import main
from walog.bench.command import build_parser
from walog.bench.soak import Soak, _Watch
from walog.bench.soak_watch import (
    DiskSample,
    FailureWatch,
    WatchedBookie,
    allocated_bytes,
    by_minute,
    table,
)

MIB = 1024 * 1024


def _disk(used_mib: float, *, journal_mib: float = 64.0, read_only: bool = False) -> DiskSample:
    return DiskSample(
        data_bytes=int((used_mib - journal_mib) * MIB),
        journal_bytes=int(journal_mib * MIB),
        free_bytes=50 * 1024 * MIB,
        read_only=read_only,
    )


def _soak(disks: list[tuple[float, dict[str, DiskSample]]], problems: list[str]) -> Soak:
    memory = [(at, {name: (100.0, 40.0) for name in d}) for at, d in disks]
    return Soak(
        seconds=disks[-1][0], entries=1, samples=memory, warmup=60.0, disks=disks,
        problems=problems, rate=None,
    )  # fmt: skip


def test_soak_rate_is_entries_per_second_or_full_and_needs_the_soak(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    assert parser.parse_args(["--soak", "1", "--soak-rate", "2500"]).soak_rate == 2500
    assert parser.parse_args(["--soak", "1", "--soak-rate", "full"]).soak_rate == 0
    assert parser.parse_args(["--soak", "1", "--soak-rate", "0"]).soak_rate == 0
    assert parser.parse_args(["--soak", "1"]).soak_rate is None  # the default rate
    with pytest.raises(SystemExit):
        parser.parse_args(["--soak", "1", "--soak-rate", "fast"])
    assert "--soak-rate must be a number of entries/s, 0 or 'full', got 'fast'" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as exited:
        main(["--soak-rate", "100"])
    assert exited.value.code == 2
    assert "--soak-rate needs --soak MINUTES" in capsys.readouterr().err


def test_disk_use_that_keeps_growing_fails_the_soak_and_use_that_breathes_does_not() -> None:
    # Twenty minutes, a sample every 10 s; the windows are the five minutes after the
    # one-minute warm-up and the last five.
    times = [10.0 * i for i in range(121)]
    breathing = [(at, {"bookie-0": _disk(700.0 + 300.0 * (int(at) % 60 == 0))}) for at in times]
    assert _soak(breathing, []).failures() == []
    growing = [(at, {"bookie-0": _disk(500.0 + at)}) for at in times]
    (failure,) = _soak(growing, []).failures()
    assert failure == (
        "bookie-0's disk use kept growing: peak 1,700.0 MiB in the last window against "
        "860.0 MiB after the warm-up (more than 1.5x)"
    )


def test_a_bookie_that_exited_or_whose_journal_failed_fails_the_soak() -> None:
    disks = [(10.0 * i, {"bookie-0": _disk(500.0)}) for i in range(20)]
    problems = ["bookie-1 (pid 4242) exited", 'bookie-2: {"event": "journal failed"}']
    soak = _soak(disks, problems)
    assert soak.failures() == problems
    results = soak.results()
    assert results["soak_bookies_lost"] == 1
    assert results["soak_failures"] == problems
    assert results["soak_rate"] == "full"


def test_the_disk_table_has_a_row_per_minute_with_each_bookies_peak() -> None:
    samples = [
        (5.0, {"b0": _disk(100.0), "b1": _disk(300.0)}),
        (55.0, {"b0": _disk(200.0), "b1": _disk(150.0, read_only=True)}),
        (65.0, {"b0": _disk(120.0, journal_mib=70.0), "b1": _disk(160.0)}),
    ]
    acknowledged = [(5.0, 1000), (55.0, 11000), (65.0, 14000)]
    rows = by_minute(samples, acknowledged)
    assert [(r.minute, r.used_mib, r.max_mib, r.read_only, r.entries_per_s) for r in rows] == [
        (1, {"b0": 200.0, "b1": 300.0}, 300.0, ["b1"], 200),  # 11,000 in 55 s
        (2, {"b0": 120.0, "b1": 160.0}, 160.0, [], 300),  # 3,000 in 10 s
    ]
    assert table(rows) == [
        "| minute | entries/s | b0, MiB | b1, MiB | max, MiB | journal, MiB | free, GiB "
        "| read-only |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
        "| 1 | 200 | 200.0 | 300.0 | 300.0 | 64.0 | 50.0 | b1 |",
        "| 2 | 300 | 120.0 | 160.0 | 160.0 | 70.0 | 50.0 | - |",
    ]
    assert table(by_minute(samples))[2].startswith("| 1 | - | 200.0 |")  # not counted


def test_the_failure_watch_reads_only_new_whole_lines_of_the_bookies_log(tmp_path: Path) -> None:
    log = tmp_path / "bookie.log"
    log.write_text('{"event": "checkpoint failed", "error": "from an earlier run"}\n')
    watch = FailureWatch(log)
    with log.open("a") as out:
        out.write('{"event": "bookie ready"}\n{"error": "ENOSPC", "event": "journal failed"}\n')
        out.write('{"event": "checkpoint fai')  # being written
    assert watch.new_failures() == ['{"error": "ENOSPC", "event": "journal failed"}']
    with log.open("a") as out:
        out.write('led"}\n')
    assert watch.new_failures() == ['{"event": "checkpoint failed"}']
    assert watch.new_failures() == []


def test_disk_use_counts_allocated_blocks_and_leaves_the_journal_apart(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    journal.mkdir()
    (tmp_path / "entry.log").write_bytes(b"x" * MIB)
    (journal / "1.journal").write_bytes(b"j" * MIB)
    assert MIB <= allocated_bytes(tmp_path, skip=journal) < 2 * MIB
    assert allocated_bytes(tmp_path) >= 2 * MIB


def test_a_bookie_that_exits_is_one_problem_and_stops_the_writer(tmp_path: Path) -> None:
    alive = [True]
    bookie = WatchedBookie(
        pid=os.getpid(),
        data_dir=tmp_path,
        journal_dir=tmp_path / "journal",
        metrics_url=None,
        log_path=None,
        running=lambda: alive[0],
    )

    async def scenario() -> _Watch:
        watch = _Watch({"bookie-0": bookie}, time.monotonic())
        await watch.sample()
        assert not watch.broken.is_set() and len(watch.disks) == 1
        alive[0] = False
        await watch.sample()
        await watch.sample()
        assert watch.broken.is_set()
        return watch

    watch = asyncio.run(scenario())
    assert watch.problems == [f"bookie-0 (pid {os.getpid()}) exited"]
    assert len(watch.disks) == 1  # nothing measured once the run failed

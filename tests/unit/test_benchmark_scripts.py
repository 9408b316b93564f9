"""The scripts in benchmarks/ keep working as the code they measure changes: each one
starts and shows its help, and the one that needs no cluster measures a short run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.processes import REPO, run_python

SCRIPTS = sorted(p for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_"))
"""The scripts (modules whose names start with ``_`` are their helpers)."""


def test_benchmarks_holds_scripts() -> None:
    assert {s.name for s in SCRIPTS} >= {"checkpoint_cpu.py", "sync_handover.py"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_every_benchmark_script_starts_and_shows_its_help(script: Path) -> None:
    assert "usage:" in run_python(str(script), "--help")


def test_checkpoint_cpu_reports_the_cpu_per_entry_of_a_short_run() -> None:
    out = run_python(
        "benchmarks/checkpoint_cpu.py",
        *("--entries", "400", "--ledgers", "2", "--size", "1024"),
        *("--checkpoints", "2", "--repeat", "1"),
    )
    assert re.fullmatch(
        r"800 entries in add batches of 100 x 1 runs: best \d+\.\d\d us CPU per entry .*\n", out
    ), out


def test_add_path_cpu_reports_the_cpu_per_entry_of_both_codes() -> None:
    out = run_python(
        "benchmarks/add_path_cpu.py",
        *("--entries", "64", "--batches", "2", "--rounds", "1", "--repeat", "1", "--both"),
    )
    number = r"\d+\.\d\d\d"
    for code in ("compiled", "pure Python"):
        line = (
            rf"{code}: 128 entries of 1024 bytes in batches of 64 x 1 runs: best {number} us "
            rf"CPU per entry \(unpack {number} \+ refused {number}; runs: .*\)\n"
        )
        assert re.search(line, out), out


def test_record_path_cpu_reports_the_cpu_per_record_of_both_codes() -> None:
    out = run_python(
        "benchmarks/record_path_cpu.py",
        *("--records", "50", "--entries", "4", "--repeat", "1", "--both"),
    )
    number = r"\d+\.\d\d\d"
    for code in ("compiled", "pure Python"):
        line = (
            rf"{code}: 200 records of 100 bytes in entries of 50 x 1 runs: best {number} us "
            rf"CPU per record \(gather {number} \+ resolve {number}; runs: .*\)\n"
        )
        assert re.search(line, out), out

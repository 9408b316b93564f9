"""The cost curves of ``walog bench``: counting metadata calls, the curve sections of the
report, the command line (no timing checks)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from walog.bench import main
from walog.bench.curve_metadata import CountingStore, metadata_per_operation
from walog.bench.curve_runs import curve_command
from walog.bench.curves import CURVES, CURVES_HEADING, Curve, section, write_curves
from walog.metadata import open_store
from walog.testing import LocalCluster


def _curve(name: str = "curve-logs", value: int = 100) -> Curve:
    return Curve(
        name=name,
        title=f"Appends to many logs ({name})",
        columns=["logs", "records/s", "ack p99 ms"],
        rows=[[1, value * 1000, 2.5], [1000, value * 800, 9.25]],
        bound="at least 70 %.",
        holds=True,
        plot=[("records/s", "records/s"), ("ack p99 ms", "ms")],
        command="walog bench --only curve-logs",
        uptime="11:00 up 1 day, load average: 1.00, 2.00, 3.00",
        date="2026-11-27 11:00 UTC",
    )


def test_counting_store_counts_each_call_and_the_record_bytes(tmp_path: Path) -> None:
    async def run() -> CountingStore:
        store = CountingStore(await open_store(f"sqlite:///{tmp_path / 'meta.db'}"))
        try:
            await store.create("/a", b"12345")
            await store.get("/a")
            await store.set("/a", b"123", 0)
            await store.children("/")
            await store.next_id("ids")
            await store.delete("/a")
        finally:
            await store.close()
        return store

    store = asyncio.run(run())
    assert dict(store.calls) == {
        "create": 1, "get": 1, "set": 1, "children": 1, "next_id": 1, "delete": 1,
    }  # fmt: skip
    assert (store.bytes_read, store.bytes_written, store.total) == (5, 8, 6)
    store.reset()
    assert store.total == 0 and store.bytes_read == store.bytes_written == 0


def test_metadata_calls_of_a_roll_a_takeover_and_a_retention_pass_do_not_grow_with_the_log(
    tmp_path: Path,
) -> None:
    with LocalCluster(3, data_dir=tmp_path) as cluster:
        curve, kinds = asyncio.run(metadata_per_operation(cluster.metadata_uri, (3, 12), others=5))
    short, long = curve.rows
    assert short[0] == 3 and long[0] == 12 and short[-1] == long[-1] == 5
    assert short[1:6] == long[1:6] and all(isinstance(v, int) and v > 0 for v in short[1:6])
    assert curve.holds is True
    assert kinds["roll"][3] == kinds["roll"][12] and "set" in kinds["roll"][3]
    first, next_pass = short[3], short[4]
    assert isinstance(first, int) and isinstance(next_pass, int)
    assert first == next_pass + 5  # a client's first pass reads each other ledger once


def test_a_curve_section_names_its_command_load_bound_and_verdict() -> None:
    text = "\n".join(section(_curve(), "img/curve-logs.png"))
    assert "walog bench --only curve-logs" in text
    assert "`11:00 up 1 day, load average: 1.00, 2.00, 3.00`" in text
    assert "| logs | records/s | ack p99 ms |" in text
    assert "| 1,000 | 80,000 | 9.25 |" in text
    assert "**Bound:** at least 70 %. **It holds.**" in text
    assert "![Appends to many logs (curve-logs)](img/curve-logs.png)" in text


def test_writing_a_curve_again_replaces_its_section_and_keeps_the_rest(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    page.write_text("# Benchmarks\n\nMeasured elsewhere.\n")
    write_curves([_curve(value=100), _curve("curve-gc", value=7)], page)
    write_curves([_curve(value=300)], page)
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nMeasured elsewhere.\n")
    assert text.count(CURVES_HEADING) == 1 and text.count("<!-- curve curve-logs -->") == 1
    assert "| 1 | 300,000 | 2.5 |" in text and "| 1 | 100,000 | 2.5 |" not in text
    assert "| 1 | 7,000 | 2.5 |" in text  # the other curve stays
    assert text.index("curve curve-logs") < text.index("curve curve-gc")
    assert (page.parent / "img" / "curve-logs.png").stat().st_size > 0


def test_a_curve_rejects_an_unknown_name_and_a_plotted_column_it_lacks() -> None:
    with pytest.raises(ValueError, match="unknown curve 'curve-bogus'"):
        Curve(name="curve-bogus", title="", columns=["x"])
    with pytest.raises(ValueError, match="plotted column 'y' is not a column"):
        Curve(name="curve-gc", title="", columns=["x"], plot=[("y", "s")])
    assert Curve.from_json(json.loads(json.dumps(_curve().to_json()))) == _curve()


def test_a_curve_command_measures_that_curve_alone_at_the_run_s_niceness() -> None:
    command = curve_command(
        ["--curves", "--seconds", "5", "--curves-report", "docs/b.md", "--output", "r.json"],
        "curve-gc",
    )
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    prefix = f"nice -n {niceness} " if niceness > 0 else ""
    assert command == f"{prefix}walog bench --only curve-gc --seconds 5"


def test_only_takes_curve_names_and_rejects_unknown_ones_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--only", "curve-logs,curve-bogus"])
    err = capsys.readouterr().err
    assert "unknown scenario curve-bogus" in err and ", ".join(CURVES) in err


def test_a_curve_alone_runs_no_scenario_and_reports_the_curve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    page = tmp_path / "benchmarks.md"
    report = ["--curves-report", str(page)]
    status = main(["--only", "curve-metadata", "--seconds", "0.5", "--json", *report])
    assert status == 0
    results = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(results["curves"]) == ["curve-metadata"]
    assert not results.keys() & {"ledger_append_eps", "append_p50_ms", "recovery_s"}
    assert "<!-- curve curve-metadata -->" in page.read_text()

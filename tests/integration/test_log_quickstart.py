"""The quickstart tour runs end to end and shows the fencing of the first writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from walog.cli.quickstart import run_quickstart


def test_quickstart_shows_takeover_fencing_and_truncation() -> None:
    lines: list[str] = []
    assert run_quickstart(say=lines.append) == 0
    text = "\n".join(lines)
    assert "WriterFencedError" in text
    assert "the reader followed the change of writer: order-8" in text
    assert "2 whole ledger(s) deleted" in text


def test_walog_quickstart_prints_only_its_own_narration(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("WALOG_LOG_LEVEL", None)
    done = subprocess.run(
        [sys.executable, "-m", "walog", "quickstart"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith("1. Starting a local cluster")
    # Every line is a numbered step, its indented continuation, or the closing line.
    assert all(
        line[:1].isdigit() or line.startswith(" ") or line.startswith("Done") for line in lines
    )

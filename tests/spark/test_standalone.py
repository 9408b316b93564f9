"""The example pipeline on a standalone Spark cluster: a master and two workers, each a JVM
of its own started from the installed pyspark, executors in further processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import ROOT
from tests.spark.standalone import StandaloneSpark
from walog.testing import LocalCluster

pytestmark = pytest.mark.spark
PIPELINE = ROOT / "examples" / "spark" / "pipeline.py"


def _pipeline(
    cluster: LocalCluster, tmp_path: Path, events: int, per_trigger: int, *, kill: bool
) -> dict[str, Any]:
    work = tmp_path / "work"
    with StandaloneSpark(tmp_path / "spark", workers=2) as standalone:
        command = [
            sys.executable, str(PIPELINE), "--metadata", cluster.metadata_uri,
            "--work", str(work), "--master", standalone.master_url,
            "--events", str(events), "--per-trigger", str(per_trigger),
        ]  # fmt: skip
        with subprocess.Popen(
            command, env=standalone.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as driver:
            killed = None
            if kill:
                killed = _kill_an_executor_mid_stream(standalone, work, driver)
            out, err = driver.communicate(timeout=900)
    assert driver.returncode == 0, err.decode(errors="replace")[-3000:]
    if kill:
        assert killed is not None, "no executor was running mid-stream"
    summary: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return summary


def _kill_an_executor_mid_stream(
    standalone: StandaloneSpark, work: Path, driver: subprocess.Popen[bytes]
) -> int | None:
    """Once the restarted stream has committed a micro-batch, SIGKILL one executor JVM
    (its worker starts another; Spark runs the lost tasks again)."""
    deadline = time.monotonic() + 600
    marker, commits = work / "stream-restarting", work / "checkpoints" / "enrich" / "commits"
    before: int | None = None
    while time.monotonic() < deadline and driver.poll() is None:
        if before is None and marker.exists():
            before = _committed(commits)
        if before is not None and _committed(commits) > before:
            pids = standalone.executor_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                return pids[0]
        time.sleep(0.1)  # polling another process's files: there is no event to await
    return None


def _committed(commits: Path) -> int:
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0


def _check(summary: dict[str, Any], events: int) -> None:
    # Every event of the source is in the sink's log once: no loss, no duplicate.
    assert summary["enriched"] == summary["enriched_distinct"] == events
    assert (summary["enriched_min_seq"], summary["enriched_max_seq"]) == (0, events - 1)
    assert summary["micro_batches"] >= 2
    # Archive plus retention left the source short; the tiered read still sees everything.
    assert summary["archived_ledgers"] >= 2 and summary["deleted_ledgers"] >= 2
    assert summary["ledgers_left"] <= 2
    assert summary["tiered_read"] == summary["total_events"] == events
    assert summary["stream_total_events"] == events


@pytest.mark.timeout(600)  # three JVMs, executors and two queries on a busy 2-core machine
def test_pipeline_on_a_standalone_cluster_writes_every_event_once_and_reads_the_tiered_log(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    _check(_pipeline(cluster, tmp_path, events=400, per_trigger=150, kill=False), 400)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_executor_killed_mid_stream_loses_and_duplicates_nothing(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    _check(_pipeline(cluster, tmp_path, events=20000, per_trigger=1000, kill=True), 20000)

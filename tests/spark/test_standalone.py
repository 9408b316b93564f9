"""The sink and the example pipeline on a standalone Spark cluster: a master and two
workers, each a JVM of its own on its own loopback address, started from the installed
pyspark, executors in further processes. The tests share one cluster (starting it costs
some 10 s); each runs its driver in a process of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import walog
from tests.processes import DIE_WITH_PARENT
from tests.spark.conftest import ROOT
from walog.log.sink import SINK_TAG
from walog.testing import LocalCluster, StandaloneSpark, free_port

pytestmark = pytest.mark.spark
PIPELINE = ROOT / "examples" / "spark" / "pipeline.py"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneSpark]:
    """A master and two workers (one core each, on 127.0.0.2 and 127.0.0.3)."""
    with StandaloneSpark(tmp_path_factory.mktemp("spark"), workers=2) as spark_cluster:
        yield spark_cluster


def _pipeline(
    standalone: StandaloneSpark,
    cluster: LocalCluster,
    tmp_path: Path,
    events: int,
    per_trigger: int,
    *,
    kill: bool,
) -> dict[str, Any]:
    work = tmp_path / "work"
    command = [
        *DIE_WITH_PARENT, sys.executable, str(PIPELINE), "--metadata", cluster.metadata_uri,
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


@pytest.mark.slow  # three JVMs: the default suite runs Spark in local mode only
@pytest.mark.timeout(600)  # three JVMs, executors and two queries on a busy 2-core machine
def test_pipeline_on_a_standalone_cluster_writes_every_event_once_and_reads_the_tiered_log(
    standalone: StandaloneSpark, cluster: LocalCluster, tmp_path: Path
) -> None:
    summary = _pipeline(standalone, cluster, tmp_path, events=400, per_trigger=150, kill=False)
    _check(summary, 400)


def _log_records(client: walog.Client, log: str) -> list[bytes]:
    with client.open_log(log).open_reader("earliest") as reader:
        got = []
        # Every ledger of the log is closed: a second without a record is its end.
        while (record := reader.read_next(timeout=1.0)) is not None:
            got.append(record.data)
    return got


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_speculative_copy_on_a_standalone_cluster_leaves_every_row_once_and_no_ledger_behind(
    standalone: StandaloneSpark, cluster: LocalCluster, log_name: str
) -> None:
    rows, partitions = 400, 2
    command = [
        sys.executable, "-m", "tests.spark.speculative_sink", "--master", standalone.master_url,
        "--metadata", cluster.metadata_uri, "--log", log_name, "--ui-port", str(free_port()),
        "--rows", str(rows), "--partitions", str(partitions), "--slow-partition", "0",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=standalone.env(), capture_output=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    tasks = summary["tasks"]
    speculative = [t for t in tasks if t["speculative"] and t["status"] != "RUNNING"]
    assert speculative, f"Spark ran no speculative attempt (the task attempts: {tasks})"
    # Each partition was written by several attempts at most, and one of them succeeded.
    assert sorted(t["index"] for t in tasks if t["status"] == "SUCCESS") == list(range(partitions))
    assert not [t for t in tasks if t["status"] == "FAILED"], tasks

    with walog.connect(cluster.metadata_uri) as client:
        # The log holds every input row once.
        assert Counter(_log_records(client, log_name)) == Counter(
            f"row-{i:06d}".encode() for i in range(rows)
        )
        # The job's attempts wrote more ledgers than the commit linked (linkOrder=written:
        # no copies), and none of the others is left: the discarded attempts' were deleted.
        before, after = summary["ledger_ids_between"]
        created = set(range(before + 1, after))
        linked = set(client.open_log(log_name).metadata().ledger_ids)
        assert linked <= created and len(linked) == partitions
        assert created - linked, "no attempt wrote a ledger that the commit did not link"
        existing = set(client.list_ledgers())
        assert not (created - linked) & existing
        leftovers = [
            i for i in existing - linked
            if (client.ledger_metadata(i).custom_metadata or {}).get(SINK_TAG) == log_name
        ]  # fmt: skip
        assert leftovers == []


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_executor_killed_mid_stream_loses_and_duplicates_nothing(
    standalone: StandaloneSpark, cluster: LocalCluster, tmp_path: Path
) -> None:
    summary = _pipeline(standalone, cluster, tmp_path, events=20000, per_trigger=1000, kill=True)
    _check(summary, 20000)


_STARTER = """
import sys, time
from pathlib import Path
from walog.testing import StandaloneSpark
standalone = StandaloneSpark(Path(sys.argv[1]), workers=1).__enter__()
print(*standalone.daemon_pids(), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; its new parent has not reaped it yet


@pytest.mark.slow  # a master and a worker JVM of its own
@pytest.mark.timeout(180)
def test_spark_daemons_die_with_the_process_that_started_them_even_after_sigkill(
    tmp_path: Path,
) -> None:
    with subprocess.Popen(
        # DIE_WITH_PARENT: the starter itself never outlives a killed test run.
        [*DIE_WITH_PARENT, sys.executable, "-c", _STARTER, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as starter:
        assert starter.stdout is not None
        pids = [int(pid) for pid in starter.stdout.readline().split()]
        assert len(pids) == 2, "the starter did not bring the cluster up"
        assert all(_alive(pid) for pid in pids)
        starter.kill()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)  # processes of another parent: nothing here can wait for them
    assert [pid for pid in pids if _alive(pid)] == [], "Spark daemons outlived their starter"

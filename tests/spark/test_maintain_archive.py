"""``walog maintain --once`` running a log's stored archive policy for real: a process of
its own with a Spark of its own archives the closed ledgers to Parquet, then the stored
retention (``require_archived=True``) deletes what the archive holds, and a reader from
"earliest" still reads every record, through the archive and then the bookies.

One run serves every test of the module (starting Spark costs seconds): a log with three
closed ledgers and a fourth that a live writer holds open while ``walog maintain`` runs.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import walog
from tests.processes import DIE_WITH_PARENT
from tests.spark.test_spark import Written, _append
from walog.log import archive_layout
from walog.log.log_metadata import LogMetadata
from walog.log.position import Segment, ledger_end, ledger_start
from walog.testing import LocalCluster

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
LOG = "maintain-archive"


@dataclasses.dataclass
class Run:
    """One ``walog maintain --once`` run and the log around it."""

    done: subprocess.CompletedProcess[str]
    archive: Path
    closed: list[Segment]
    """The closed ledgers before the run, oldest first."""
    open_ledger: int
    """The ledger the live writer held open during the run."""
    after: LogMetadata
    """The log's record right after the run (the writer still open)."""
    written: Written
    """Every record written, in log order."""


@pytest.fixture(scope="module")
def maintain_run(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("maintain-archive")
    archive = tmp / "archive"
    config = walog.LogConfig(
        retention=walog.RetentionPolicy(max_age=1e-6, require_archived=True),
        archive=walog.ArchivePolicy(to=str(archive)),
    )
    with walog.connect(cluster.metadata_uri) as client:
        log = client.create_log(LOG, config)
        written: Written = []
        with log.open_writer() as writer:
            for count, tag in ((9, "first"), (6, "second"), (5, "third")):
                written += _append(writer, count, tag=tag)
                writer.roll()
            written += _append(writer, 3, tag="open")
            writer.flush()
            segments = log.segments()
            assert [s.state for s in segments] == ["CLOSED"] * 3 + ["OPEN"]
            env = dict(os.environ, PYTHONPATH=str(REPO), WALOG_SPARK_LOG=str(tmp / "spark.log"))
            done = subprocess.run(
                [
                    *DIE_WITH_PARENT,
                    sys.executable,
                    "-m",
                    "walog",
                    "maintain",
                    "--once",
                    "--metadata",
                    cluster.metadata_uri,
                    "--spark-master",
                    "local[1]",
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            after = log.metadata()
        yield Run(done, archive, segments[:-1], segments[-1].ledger_id, after, written)


def _line(run: Run) -> str:
    """The run's report line for the log."""
    assert run.done.returncode == 0, run.done.stdout + run.done.stderr
    lines = [x for x in run.done.stdout.splitlines() if x.startswith(f"log {LOG!r}:")]
    assert len(lines) == 1, run.done.stdout
    return lines[0]


def test_maintain_archives_every_closed_ledger_to_parquet_and_marks_it_archived(
    maintain_run: Run,
) -> None:
    import pyarrow.parquet as pq

    _line(maintain_run)
    root, after = maintain_run.archive, maintain_run.after
    columns = [name for name, _ in archive_layout.COLUMNS]
    for segment in maintain_run.closed:
        files = archive_layout.parquet_files(root, segment.ledger_id)
        assert files and all(pq.read_schema(f).names == columns for f in files)
        assert sum(pq.read_metadata(f).num_rows for f in files) == sum(
            1 for p, _ in maintain_run.written if p.ledger_id == segment.ledger_id
        )
    archived = sorted(filter(None, map(archive_layout.ledger_of_dir, os.listdir(root))))
    assert archived == [s.ledger_id for s in maintain_run.closed]
    last = maintain_run.closed[-1]
    assert after.archived_through is not None
    assert ledger_end(last.ledger_id, last.last_entry_id) <= after.archived_through
    assert after.archived_through <= ledger_start(maintain_run.open_ledger)
    assert after.archive_location == str(root.resolve())


def test_maintain_deletes_only_archived_ledgers_and_never_the_open_one(
    maintain_run: Run,
) -> None:
    _line(maintain_run)
    after = maintain_run.after
    assert [x.ledger_id for x in after.ledgers] == [maintain_run.open_ledger]
    assert after.archived_through is not None and after.truncated_through is not None
    assert after.truncated_through <= after.archived_through


def test_maintains_line_for_the_log_names_the_ledgers_it_archived_and_deleted(
    maintain_run: Run,
) -> None:
    line = _line(maintain_run)
    ids = ", ".join(str(s.ledger_id) for s in maintain_run.closed)
    assert f"archive: archived ledgers {ids} to {maintain_run.archive}" in line, line
    assert f"deleted {len(maintain_run.closed)} ledger(s)" in line, line
    assert "FAILED" not in line, line


def test_a_reader_from_earliest_reads_every_record_through_the_archive_then_the_bookies(
    maintain_run: Run, cluster: LocalCluster
) -> None:
    _line(maintain_run)
    expected = maintain_run.written
    with (
        walog.connect(cluster.metadata_uri) as client,
        client.open_log(LOG).open_reader("earliest") as reader,
    ):
        got = [reader.read_next(timeout=10) for _ in expected]
        assert [(r.position, r.data) for r in got if r] == expected
        assert reader.read_next(timeout=0.2) is None

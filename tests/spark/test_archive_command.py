"""``walog archive`` as a user runs it: a process of its own, with a Spark of its own.

One run serves every test of the module (starting Spark costs seconds): a log with two
closed ledgers and a third that a live writer holds open.
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
from walog.testing import LocalCluster

REPO = Path(__file__).resolve().parents[2]
LOG = "archive-command"


@dataclasses.dataclass
class Run:
    """What one ``walog archive`` run printed, and the log's ledgers around it."""

    done: subprocess.CompletedProcess[str]
    open_ledger: int
    spark_log: Path


@pytest.fixture(scope="module")
def archive_run(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("archive-command")
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(LOG)
        for batch in ([b"a", b"b"], [b"c"]):
            with log.open_writer() as writer:
                for record in batch:
                    writer.append(record)
        with log.open_writer() as writer:
            writer.append(b"d")
            open_ledger = log.segments()[-1].ledger_id
            env = dict(os.environ, PYTHONPATH=str(REPO), WALOG_SPARK_LOG=str(tmp / "spark.log"))
            done = subprocess.run(
                [
                    *DIE_WITH_PARENT,
                    sys.executable,
                    "-m",
                    "walog",
                    "archive",
                    LOG,
                    "--metadata",
                    cluster.metadata_uri,
                    "--to",
                    str(tmp / "archive"),
                    "--master",
                    "local[1]",
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            yield Run(done, open_ledger, tmp / "spark.log")


def test_walog_archive_says_where_the_archive_ends_at_a_position_that_exists(
    archive_run: Run,
) -> None:
    done = archive_run.done
    assert done.returncode == 0, done.stderr
    # archived_through is one past ledger 2's last entry, an entry it never had: the
    # first record not archived is the open ledger's first.
    assert done.stdout.endswith(
        f"; archived up to {archive_run.open_ledger}:0:0 (not included)\n"
    ), done.stdout


def test_spark_log_lines_never_reach_the_terminal_of_walog_archive(archive_run: Run) -> None:
    done = archive_run.done
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    assert archive_run.spark_log.exists()

"""A log whose archive job fails under ``walog maintain`` still gets the retention that needs
no archive, the failure is in the log's report (line, JSON, failure metric), and the next
pass runs the job again, whatever the archive policy's interval.

The job is the real one (``walog.spark.archive.archive_log``) on the tests' local Spark
session; its archive directory is first a file, which the job cannot write under.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import walog
import walog.aio
from walog.log import archive_layout
from walog.maintenance.metrics import MaintainMetrics
from walog.maintenance.service import Maintainer
from walog.spark.archive import archive_log
from walog.testing import LocalCluster

# ~80 s alone (a Spark job, retention and a second pass): with --slow; maintain's report of
# an archive it cannot run is tested in the default suite without Spark (test_maintain.py).
pytestmark = [pytest.mark.spark, pytest.mark.slow]


class SessionArchiver:
    """The archive job on a Spark session the caller owns (the service's own archiver
    starts and stops a session of its own)."""

    def __init__(self, spark: SparkSession, metadata_uri: str) -> None:
        self._spark = spark
        self._uri = metadata_uri
        self.runs = 0

    def missing(self) -> str | None:
        """Nothing is missing: pyspark is here."""
        return None

    def __call__(self, name: str, to: str) -> tuple[int, ...]:
        """Run the archive job of log ``name`` to ``to``; return the ledgers archived."""
        self.runs += 1
        result = archive_log(self._spark, self._uri, name, to, progress=False)
        return tuple(result.ledger_ids)


async def test_a_failed_archive_job_leaves_retention_applied_is_reported_and_runs_again_next_pass(
    cluster: LocalCluster, log_name: str, tmp_path: Path, spark: SparkSession
) -> None:
    target = tmp_path / "archive"
    target.write_text("a file where the archive directory should be\n")
    config = walog.LogConfig(
        retention=walog.RetentionPolicy(max_age=1e-6),  # archiving not required
        archive=walog.ArchivePolicy(to=str(target), interval_s=3600.0),
    )
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        log = await client.create_log(log_name, config)
        for i in range(3):  # three closed ledgers, each of a writer of its own
            writer = await log.open_writer()
            await writer.append(b"record %d" % i)
            await writer.close()
        ledgers = [s.ledger_id for s in await log.segments()]
        assert len(ledgers) == 3
        archiver = SessionArchiver(spark, cluster.metadata_uri)
        maintainer = Maintainer(client, archiver=archiver)  # the service: not --once
        metrics = MaintainMetrics()

        reports = {r.name: r for r in await maintainer.pass_once()}
        metrics.record(list(reports.values()), 1.0)
        failed = reports[log_name]
        assert archiver.runs == 1
        # Retention ran all the same: every ledger but the last, none archived.
        assert failed.deleted == 2 and failed.archived == ()
        assert [s.ledger_id for s in await log.segments()] == ledgers[-1:]
        assert (await log.metadata()).archived_through is None
        # Reported: the line, the JSON document and the failure counter.
        assert failed.error is not None and "Error" in failed.error, failed
        assert f"FAILED: {failed.error}" in failed.line()
        assert failed.as_json()["error"] == failed.error
        assert failed.as_json()["deleted"] == 2
        assert metrics.failures[log_name] == 1

        # The next pass, long before the policy's interval, runs the job again.
        target.unlink()
        reports = {r.name: r for r in await maintainer.pass_once()}
        metrics.record(list(reports.values()), 1.0)
        again = reports[log_name]
        assert archiver.runs == 2, again.line()
        assert again.error is None, again.line()
        assert again.archived == (ledgers[-1],), again.line()
        assert archive_layout.parquet_files(target, ledgers[-1])
        assert metrics.failures[log_name] == 1

"""Tiered reads: ledgers archived to Parquet and truncated are read back transparently."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import pytest
from pyspark.sql import SparkSession

import walog
from tests.spark.test_spark import (
    Written,
    _append,
    _append_over_ledgers,
    _load,
    _open,
    _rows,
)
from walog.log import archive_layout
from walog.log.archived import archived_only
from walog.log.log_metadata import LogMetadata
from walog.log.position import Position
from walog.spark.archive import archive_log
from walog.testing import LocalCluster

pytestmark = pytest.mark.spark


def _tiered_log(
    spark: SparkSession, client: walog.Client, uri: str, name: str, root: Path
) -> tuple[Written, Position]:
    """A log whose first ledgers are only in the archive, followed by ledgers on bookies."""
    retention = walog.RetentionPolicy(max_age=1e-6, require_archived=True)
    log = _open(client, name, retention=retention)
    with log.open_writer() as writer:
        written = _append_over_ledgers(writer, 30)
    with log.open_writer() as writer:
        archive_log(spark, uri, name, root, progress=False)
        # The takeover closed every earlier ledger, so the archive took them all: retention
        # deletes every ledger but the new writer's, at least the two holding records.
        listed = log.segments()
        assert log.enforce_retention() == len(listed) - 1 >= 2
        written += _append(writer, 12, tag="later")
    meta = log.metadata()
    assert meta.truncated_through is not None and meta.archive_location == str(root.resolve())
    return written, meta.truncated_through


def _assert_one_layout(meta: LogMetadata, root: Path) -> None:
    """The archive job wrote, and the tiered reader finds, what walog.log.archive_layout
    defines: a ``ledger=<id>`` directory per ledger, Parquet files of its columns, and the
    marker of the archive's format version."""
    import pyarrow.parquet as pq

    archived = [a.ledger_id for a in archived_only(meta)]
    dirs = sorted(filter(None, map(archive_layout.ledger_of_dir, os.listdir(root))))
    assert len(archived) >= 2 and archived == dirs
    assert sorted(os.listdir(root)) == sorted(
        [archive_layout.MARKER, archive_layout.STAGING, *map(archive_layout.ledger_dir_name, dirs)]
    )
    assert (root / archive_layout.MARKER).read_bytes() == archive_layout.marker_bytes()
    columns = [name for name, _ in archive_layout.COLUMNS]
    for ledger_id in archived:
        files = archive_layout.parquet_files(root, ledger_id)
        assert files and all(pq.read_schema(f).names == columns for f in files)


def test_every_reader_reads_across_the_archive_bookie_boundary_with_the_same_positions(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri = cluster.metadata_uri
    with walog.connect(uri) as client:
        written, truncated = _tiered_log(spark, client, uri, log_name, tmp_path / "archive")
        assert written[0][0] < truncated < written[-1][0]
        log = client.open_log(log_name)
        _assert_one_layout(log.metadata(), tmp_path / "archive")
        mid = len(written) // 3
        starts: list[tuple[Literal["earliest"] | Position, Written]] = [
            ("earliest", written),
            (written[mid][0], written[mid:]),
        ]
        for start, expected in starts:
            with log.open_reader(start) as reader:
                got = [reader.read_next(timeout=10) for _ in expected]
                assert [(r.position, r.data) for r in got if r] == expected
                assert reader.read_next(timeout=0.2) is None
        with pytest.raises(walog.DataLossError, match="truncated"):
            log.open_reader(Position(0, 0, 0))
    assert _rows(_load(spark, uri, log_name)) == written
    assert _rows(_load(spark, uri, log_name, startPosition=written[mid][0])) == written[mid:]
    with pytest.raises(Exception, match="not in the archive"):
        _load(spark, uri, log_name, startPosition="0:0:0").collect()
    lossy = _load(spark, uri, log_name, startPosition="0:0:0", failOnDataLoss="false")
    assert _rows(lossy) == written
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (
        spark.readStream.format("walog").option("metadata", uri).option("log", log_name)
        .option("maxRecordsPerTrigger", "10").load()
        .writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )  # fmt: skip
    assert query.awaitTermination(180) and query.exception() is None
    assert sorted(_rows(spark.read.parquet(str(out)))) == written


def test_the_archive_job_refuses_a_newer_archive_before_it_claims_a_run(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri = cluster.metadata_uri
    root = tmp_path / "archive"
    root.mkdir()
    newer = archive_layout.ARCHIVE_FORMAT + 1
    (root / archive_layout.MARKER).write_text(json.dumps({"format": newer}))
    with walog.connect(uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            _append_over_ledgers(writer, 10)
        both = f"has format version {newer}; this walog reads up to {newer - 1}: upgrade walog"
        with pytest.raises(walog.NewerFormatError, match=both):
            archive_log(spark, uri, log_name, root, progress=False)
        meta = log.metadata()
    assert meta.archive_intent is None and meta.archived_through is None
    assert os.listdir(root) == [archive_layout.MARKER]

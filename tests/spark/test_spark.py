"""The walog Spark data source and archive job on a real local Spark and real bookies.

One Spark session (``spark``, session-scoped) and one bookie cluster (``cluster``,
module-scoped) serve every test; each test writes a log of its own.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
from pathlib import Path, PurePath
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

import walog
from tests.archive_files import RecordingFiles, durable_after, tree
from tests.spark.streams import stream_available_now
from walog.log.archive_layout import MARKER, STAGING
from walog.log.position import Position
from walog.spark.archive import ArchiveIntent, _Archiver, archive_log
from walog.spark.archive_files import LocalFiles
from walog.testing import LocalCluster

pytestmark = pytest.mark.spark

Written = list[tuple[Position, bytes]]


def _append(
    writer: walog.LogWriter, count: int, *, burst: int = 4, tag: str = "r", first: int = 0
) -> Written:
    """Append ``count`` records in bursts (records of a burst share entries), numbered from
    ``first``."""
    out: Written = []
    for start in range(first, first + count, burst):
        stop = min(first + count, start + burst)
        payloads = [f"{tag}-{i:05d}".encode() for i in range(start, stop)]
        futures: list[concurrent.futures.Future[Position]] = [
            writer.append_async(p) for p in payloads
        ]
        out.extend((f.result(timeout=30), p) for f, p in zip(futures, payloads, strict=True))
    return out


def _append_over_ledgers(writer: walog.LogWriter, count: int, *, tag: str = "r") -> Written:
    """Append ``count`` records, the second half after a roll: they span at least two
    ledgers.

    A roll policy only starts a roll; records go on into the old ledger until the new one
    is in the log's list (docs/logs.md, "Rolling"), so with a slow metadata store any
    number of records may land in one ledger. ``writer.roll()`` returns once the writer has
    switched (to the ledger of a roll already under way, or of a new one).
    """
    half = count // 2
    out = _append(writer, half, tag=tag)
    writer.roll()
    out += _append(writer, count - half, tag=tag, first=half)
    assert out[half - 1][0].ledger_id < out[half][0].ledger_id
    return out


def _load(spark: SparkSession, uri: str, log: str, **options: Any) -> DataFrame:
    reader = spark.read.format("walog").option("metadata", uri).option("log", log)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _rows(frame: DataFrame) -> Written:
    return [(Position(r.ledger_id, r.entry_id, r.slot), r.data) for r in frame.collect()]


def _open(client: walog.Client, name: str, **kw: Any) -> walog.Log:
    return client.open_log(name, roll_policy=walog.RollPolicy(max_entries=3), **kw)


def test_batch_read_returns_every_record_in_log_order_one_partition_per_ledger(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            written = _append_over_ledgers(writer, 60)
        ledgers = [s.ledger_id for s in log.segments()]
    assert any(p.slot > 0 for p, _ in written), "bursts should share entries"
    frame = _load(spark, cluster.metadata_uri, log_name)
    assert frame.schema.simpleString() == (
        "struct<ledger_id:bigint,entry_id:bigint,slot:int,timestamp:timestamp,data:binary>"
    )
    assert _rows(frame) == written
    with_records = {p.ledger_id for p, _ in written}
    assert frame.rdd.getNumPartitions() == len(with_records) >= 2 and len(ledgers) >= 2
    entries = {(p.ledger_id, p.entry_id) for p, _ in written}
    split = _load(spark, cluster.metadata_uri, log_name, maxEntriesPerPartition=1)
    assert split.rdd.getNumPartitions() == len(entries)
    assert _rows(split) == written


def test_start_and_end_positions_bound_the_rows_even_inside_an_entry(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client, _open(client, log_name).open_writer() as w:
        written = _append(w, 40, burst=5)
    lo = next(i for i, (p, _) in enumerate(written) if p.slot > 0)
    hi = len(written) - 7
    frame = _load(
        spark,
        cluster.metadata_uri,
        log_name,
        startPosition=written[lo][0],
        endPosition=written[hi][0],
    )
    assert _rows(frame) == written[lo:hi]
    assert _rows(_load(spark, cluster.metadata_uri, log_name, startPosition="latest")) == []


def test_open_ledger_is_read_up_to_the_lac_captured_at_planning(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            written = _append(writer, 30)
            assert log.segments()[-1].state == "OPEN"
            first = _rows(_load(spark, cluster.metadata_uri, log_name))
            # A prefix: everything in closed ledgers, the open one up to its LAC.
            assert first == written[: len(first)]
            closed = {s.ledger_id for s in log.segments() if s.state == "CLOSED"}
            assert {p.ledger_id for p, _ in first} >= closed
            end = Position(first[-1][0].ledger_id, first[-1][0].entry_id, first[-1][0].slot + 1)
            _append(writer, 10, tag="more")
            again = _rows(_load(spark, cluster.metadata_uri, log_name, endPosition=end))
            assert again == first


def test_truncated_start_fails_unless_fail_on_data_loss_is_false(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            written = _append_over_ledgers(writer, 30)
        second = log.segments()[1].first_position
        assert log.truncate(second) == 1
    lost = written[0][0]
    with pytest.raises(Exception, match="truncated"):
        _load(spark, cluster.metadata_uri, log_name, startPosition=lost).collect()
    rows = _rows(
        _load(spark, cluster.metadata_uri, log_name, startPosition=lost, failOnDataLoss="false")
    )
    assert rows == [w for w in written if w[0] >= second]


def _stream_once(spark: SparkSession, uri: str, log: str, out: Path, checkpoint: Path) -> int:
    query = stream_available_now(
        spark,
        out,
        checkpoint,
        metadata=uri,
        log=log,
        maxRecordsPerTrigger="25",
        consumerName="archiver-test",
    )
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def test_stream_available_now_twice_from_one_checkpoint_reads_each_record_once(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            written = _append(writer, 60)
        batches = _stream_once(spark, cluster.metadata_uri, log_name, out, checkpoint)
        assert batches >= 3, "maxRecordsPerTrigger=25 splits 60 records into micro-batches"
        with log.open_writer() as writer:
            written += _append(writer, 30, tag="second")
        _stream_once(spark, cluster.metadata_uri, log_name, out, checkpoint)
        cursor = log.metadata().cursors.get("archiver-test")
    rows = sorted(_rows(spark.read.parquet(str(out))))
    assert rows == written  # every record, none twice
    assert cursor is not None and cursor > written[59][0]


def test_archive_then_retention_deletes_only_archived_ledgers(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    root = tmp_path / "archive"
    retention = walog.RetentionPolicy(max_age=1e-6, require_archived=True)
    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name, retention=retention)
        with log.open_writer() as writer:
            written = _append(writer, 40)
        with log.open_writer() as writer:  # a new open ledger, not archivable
            # The takeover closed every earlier ledger (and may have dropped an empty one).
            closed = [s for s in log.segments() if s.state == "CLOSED"]
            result = archive_log(spark, cluster.metadata_uri, log_name, root, progress=False)
            assert result.ledger_ids == tuple(s.ledger_id for s in closed)
            through = result.archived_through
            assert through == Position(closed[-1].ledger_id, closed[-1].last_entry_id + 1, 0)
            assert log.metadata().archived_through == through
            assert archive_log(spark, cluster.metadata_uri, log_name, root).ledger_ids == ()
            newer = _append(writer, 20, tag="later")
        archived = [w for w in written if w[0] < through]
        back = spark.read.parquet(str(root))
        assert sorted(_rows(back.drop("ledger"))) == archived
        assert {p.name for p in root.iterdir()} == {
            f"ledger={i}" for i in {p.ledger_id for p, _ in archived}
        } | {MARKER, STAGING}
        assert log.enforce_retention() == len(closed)
        left = log.segments()
    assert left[0].first_position >= through
    assert all(w[0] >= left[0].first_position for w in newer)


class _CrashOnRename(LocalFiles):
    """The archive job's process dies at its ``after + 1``-th rename (a new archive's first
    rename puts its version marker in place)."""

    def __init__(self, after: int) -> None:
        self.left = after

    def rename(self, source: PurePath, target: PurePath) -> None:
        if self.left == 0:
            raise OSError(f"crash before renaming {source}")
        self.left -= 1
        super().rename(source, target)


def test_archive_rerun_finishes_an_interrupted_run_without_duplicates(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    root = tmp_path / "archive"
    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            written = _append_over_ledgers(writer, 30)  # two ledgers to move, at least
        # A first run crashed after writing and moving one ledger, before the mark.
        with pytest.raises(OSError, match="crash before renaming"):
            archive_log(
                spark, cluster.metadata_uri, log_name, root, progress=False, files=_CrashOnRename(2)
            )
        left = log.metadata()
        assert left.archive_intent is not None and left.archived_through is None
        intent = ArchiveIntent.from_doc(left.archive_intent)
        assert (root / f"ledger={intent.ledger_ids[0]}").is_dir()
        result = archive_log(spark, cluster.metadata_uri, log_name, root, progress=False)
        assert result.resumed and result.ledger_ids == intent.ledger_ids
        assert result.rows is None  # the sealed write was kept
        assert log.metadata().archive_intent is None
        assert log.metadata().archived_through == intent.through
    assert not any((root / STAGING).iterdir())
    rows = sorted(_rows(spark.read.parquet(str(root)).drop("ledger")))
    assert rows == [w for w in written if w[0] < intent.through]


def test_archive_mark_moves_only_after_files_and_directories_are_synced(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    root = tmp_path / "archive"
    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            _append_over_ledgers(writer, 30)
        files = RecordingFiles(LocalFiles(), probe=lambda: log.metadata().archived_through)
        result = archive_log(spark, cluster.metadata_uri, log_name, root, files=files)
        assert log.metadata().archived_through == result.archived_through is not None
    calls = files.calls
    marked = next((i for i, c in enumerate(calls) if c.seen is not None), len(calls))
    published = tree(LocalFiles(), root, skip={STAGING})
    assert len(published) > 1 + len(result.ledger_ids)  # the root, the ledgers, their files
    unsynced = sorted(set(published) - durable_after(calls[:marked]))
    assert unsynced == [], f"not on disk when archived_through moved: {unsynced}"


@pytest.mark.parametrize("spark_finished", [False, True], ids=["unfinished", "unsynced"])
def test_archive_rerun_redoes_a_write_it_had_not_sealed(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path, spark_finished: bool
) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            written = _append(writer, 20)
        intent, _ = _Archiver(client, log_name, root).claim()
        assert intent is not None
        # Crashed mid-write (a partial file, no _SUCCESS), or lost power after the write:
        # Spark's _SUCCESS reached the disk, a part file it vouches for did not.
        partial = root / STAGING / intent.intent_id / f"ledger={intent.ledger_ids[0]}"
        partial.mkdir(parents=True)
        (partial / "part-00000.parquet").write_bytes(b"not parquet")
        if spark_finished:
            (partial.parent / "_SUCCESS").touch()
        result = archive_log(spark, cluster.metadata_uri, log_name, root, progress=False)
    assert result.resumed and result.rows == sum(1 for w in written if w[0] < intent.through)
    rows = sorted(_rows(spark.read.parquet(str(root)).drop("ledger")))
    assert rows == [w for w in written if w[0] < intent.through]


@pytest.mark.slow  # test_standalone.py runs the archive job on a standalone cluster by default
@pytest.mark.timeout(420)  # three JVMs and an executor start on a busy 2-core machine
def test_archive_command_runs_on_a_standalone_spark_cluster(
    cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    from walog.testing import StandaloneSpark

    with walog.connect(cluster.metadata_uri) as client:
        log = _open(client, log_name)
        with log.open_writer() as writer:
            written = _append(writer, 24)
        with StandaloneSpark(tmp_path / "spark") as standalone:
            command = [
                sys.executable, "-m", "walog", "archive",
                log_name, "--metadata", cluster.metadata_uri,
                "--to", str(tmp_path / "archive"), "--master", standalone.master_url,
                "--no-progress",
            ]  # fmt: skip
            done = subprocess.run(
                command, env=standalone.env(), capture_output=True, timeout=360, check=False
            )
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
        assert b"archived ledgers" in done.stdout
        through = log.metadata().archived_through
        last = log.segments()[-1]
    assert through == Position(last.ledger_id, last.last_entry_id + 1, 0)
    files = list((tmp_path / "archive").glob("ledger=*/*.parquet"))
    rows = sorted(
        (Position(r["ledger_id"], r["entry_id"], r["slot"]), r["data"])
        for f in files
        for r in pq.read_table(f).to_pylist()
    )
    assert rows == written

"""The walog sink on a real local Spark and real bookies: every row once, whatever fails."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession

import walog
from walog.log.sink import (
    DEFAULT_ORPHAN_GRACE,
    SINK_TAG,
    SinkBatch,
    SinkCommitError,
    collect_sink_orphans,
    commit_sink_batch,
)
from walog.spark.options import WriteOptions
from walog.spark.sink import SinkMessage, commit_batch, write_partition
from walog.testing import LocalCluster

pytestmark = pytest.mark.spark


def _frame(spark: SparkSession, count: int, partitions: int, tag: str = "row") -> DataFrame:
    """``count`` rows ``data = b"TAG-NNNNN"`` over ``partitions`` partitions, in order."""
    rows = [(f"{tag}-{i:05d}".encode(),) for i in range(count)]
    return spark.sparkContext.parallelize(rows, partitions).toDF("data binary")


def _save(frame: DataFrame, uri: str, log: str, **options: str) -> None:
    writer = frame.write.format("walog").option("metadata", uri).option("log", log)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def _log_rows(spark: SparkSession, uri: str, log: str) -> list[bytes]:
    frame = spark.read.format("walog").option("metadata", uri).option("log", log).load()
    return [bytes(r.data) for r in frame.collect()]


def _unlinked_sink_ledgers(client: walog.Client, log: str) -> list[int]:
    listed = set(client.open_log(log).metadata().ledger_ids)
    out = []
    for ledger_id in client.list_ledgers():
        if ledger_id in listed:
            continue
        tags = client.ledger_metadata(ledger_id).custom_metadata or {}
        if tags.get(SINK_TAG) == log:
            out.append(ledger_id)
    return out


def test_batch_sink_appends_every_row_once_in_partition_order(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    frame = _frame(spark, 90, 3)
    expected = [bytes(r.data) for r in frame.collect()]
    _save(frame, cluster.metadata_uri, log_name)
    assert _log_rows(spark, cluster.metadata_uri, log_name) == expected
    _save(_frame(spark, 10, 2, tag="more"), cluster.metadata_uri, log_name)
    rows = _log_rows(spark, cluster.metadata_uri, log_name)
    assert rows[:90] == expected and sorted(rows[90:]) == [
        f"more-{i:05d}".encode() for i in range(10)
    ]
    with walog.connect(cluster.metadata_uri) as client:
        assert _unlinked_sink_ledgers(client, log_name) == []


def test_sink_follows_a_writer_it_fences_and_the_writer_takes_over_again(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        with log.open_writer() as writer:
            before = [writer.append_async(f"w-{i}".encode()) for i in range(5)]
            for f in before:
                f.result(timeout=30)
            _save(_frame(spark, 20, 2), cluster.metadata_uri, log_name)
            with pytest.raises(walog.WriterFencedError):
                writer.append(b"after the sink")
        with log.open_writer() as writer:
            writer.append(b"w-again")
    rows = _log_rows(spark, cluster.metadata_uri, log_name)
    assert rows[:5] == [f"w-{i}".encode() for i in range(5)]
    assert sorted(rows[5:25]) == [f"row-{i:05d}".encode() for i in range(20)]
    assert rows[25:] == [b"w-again"]


def test_columns_other_than_data_are_refused_by_name_unless_serialized_as_json(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    frame = spark.createDataFrame([(b"x", 1, "a")], "data binary, n int, kind string")
    with pytest.raises(Exception, match="'n', 'kind' would not be written"):
        _save(frame, cluster.metadata_uri, log_name)
    with pytest.raises(Exception, match=r"needs a column 'data' .*got 'payload'"):
        _save(spark.createDataFrame([("x",)], "payload string"), cluster.metadata_uri, log_name)
    with pytest.raises(Exception, match="column 'data' is int"):
        _save(spark.createDataFrame([(1,)], "data int"), cluster.metadata_uri, log_name)
    with pytest.raises(Exception, match="append-only"):
        frame.select("data").write.format("walog").option("metadata", cluster.metadata_uri).option(
            "log", log_name
        ).mode("overwrite").save()
    _save(frame, cluster.metadata_uri, log_name, serialize="json")
    _save(spark.createDataFrame([("text",)], "data string"), cluster.metadata_uri, log_name)
    rows = _log_rows(spark, cluster.metadata_uri, log_name)
    assert [json.loads(rows[0])] == [{"data": "eA==", "n": 1, "kind": "a"}]
    assert rows[1:] == [b"text"]


def _fail_first_attempt(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Partition 1's first attempt passes some rows to the sink, then fails."""
    ctx = TaskContext.get()
    assert ctx is not None
    for i, batch in enumerate(batches):
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and i == 1:
            raise RuntimeError("injected task failure")
        yield batch


def test_a_failed_task_attempt_leaves_no_rows_and_no_ledger_behind(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        frame = _frame(spark, 90, 3).mapInArrow(_fail_first_attempt, "data binary")
        _save(frame, cluster.metadata_uri, log_name, maxEntryBytes="64")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    rows = _log_rows(spark, cluster.metadata_uri, log_name)
    assert sorted(rows) == [f"row-{i:05d}".encode() for i in range(90)]
    with walog.connect(cluster.metadata_uri) as client:
        assert _unlinked_sink_ledgers(client, log_name) == []


def _arrow(count: int, tag: str) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict(
        {"data": [f"{tag}-{i:03d}".encode() for i in range(count)]},
        schema=pa.schema([("data", pa.binary())]),
    )


def test_a_speculative_attempt_whose_report_is_discarded_is_deleted_at_commit(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    options = WriteOptions.parse(
        {"metadata": cluster.metadata_uri, "log": log_name}, streaming=False
    )
    with walog.connect(cluster.metadata_uri) as client:
        client.open_log(log_name)
        # Two attempts of the same partition finish; Spark keeps the report of one.
        kept = write_partition(options, "txn-spec", 0, _arrow(30, "p0"))
        loser = write_partition(options, "txn-spec", 0, _arrow(30, "p0"))
        other = write_partition(options, "txn-spec", 0, _arrow(5, "p1"))
        assert commit_batch(options, "txn-spec", 0, [kept, other])
        assert _unlinked_sink_ledgers(client, log_name) == []
        assert client.list_ledgers().count(loser.ledgers[0].ledger_id) == 0
    rows = _log_rows(spark, cluster.metadata_uri, log_name)
    assert sorted(rows) == sorted(
        [f"p0-{i:03d}".encode() for i in range(30)] + [f"p1-{i:03d}".encode() for i in range(5)]
    )


def test_driver_restart_before_or_after_the_commit_cas_links_the_batch_once(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    uri = cluster.metadata_uri
    ids = {"sinkId": "nightly", "batchId": "7"}
    options = WriteOptions.parse({"metadata": uri, "log": log_name, **ids}, streaming=False)
    with walog.connect(uri) as client:
        client.open_log(log_name)
        # A driver crashed after its tasks wrote, before its commit.
        crashed = write_partition(options, "txn-crashed", 7, _arrow(10, "lost"))
        # The rerun links batch 7 once; the crashed run's ledger is deleted by it.
        _save(_frame(spark, 40, 2), uri, log_name, **ids)
        assert _unlinked_sink_ledgers(client, log_name) == []
        assert crashed.ledgers[0].ledger_id not in client.list_ledgers()
        # Batch 8: a driver whose CAS applied, then crashed before reporting or cleaning up.
        done = write_partition(options, "txn-8", 8, _arrow(10, "eight"))
        batch = SinkBatch(log_name, "txn-8", done.ledgers, "nightly", 8)
        assert client.loop_thread.run(commit_sink_batch(client.async_client, batch, options.ledger))
        _save(_frame(spark, 40, 2, tag="dup"), uri, log_name, sinkId="nightly", batchId="8")
        assert client.open_log(log_name).metadata().sinks == {"nightly": 8}
        assert _unlinked_sink_ledgers(client, log_name) == []
    rows = _log_rows(spark, uri, log_name)
    assert sorted(rows[:40]) == [f"row-{i:05d}".encode() for i in range(40)]
    assert rows[40:] == [f"eight-{i:03d}".encode() for i in range(10)]


def test_stream_sink_links_each_micro_batch_once_across_a_restart_after_the_cas(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri, source, target = cluster.metadata_uri, log_name, f"{log_name}-out"
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (
            spark.readStream.format("walog").option("metadata", uri).option("log", source)
            .option("maxRecordsPerTrigger", "20").load().select("data")
            .writeStream.format("walog").option("metadata", uri).option("log", target)
            .option("sinkId", "copy").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        assert query.awaitTermination(180)
        assert query.exception() is None

    with walog.connect(uri) as client:
        with client.open_log(source).open_writer() as writer:
            for i in range(50):
                writer.append_async(f"in-{i:03d}".encode())
        run()
        # The driver died after the sink's CAS of its last batch, before Spark recorded it.
        commits = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
        last = max(commits, key=lambda p: int(p.name))
        last.unlink()
        (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
        with client.open_log(source).open_writer() as writer:
            for i in range(50, 70):
                writer.append_async(f"in-{i:03d}".encode())
        run()
        assert client.open_log(target).metadata().sinks["copy"] >= int(last.name)
        assert _unlinked_sink_ledgers(client, target) == []
    assert _log_rows(spark, uri, target) == [f"in-{i:03d}".encode() for i in range(70)]


def test_abandoned_sink_ledgers_are_collected_after_the_grace_period_and_never_linked_late(
    cluster: LocalCluster, log_name: str
) -> None:
    options = WriteOptions.parse(
        {"metadata": cluster.metadata_uri, "log": log_name}, streaming=False
    )
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        # A driver crashed after its tasks wrote: nothing names the batch as linked.
        left = write_partition(options, "txn-crashed", 0, _arrow(5, "x"))
        batch = SinkBatch(log_name, "txn-crashed", left.ledgers)
        # Too old to link: the collector may already consider it abandoned.
        with pytest.raises(SinkCommitError, match="more than the"):
            client.loop_thread.run(
                commit_sink_batch(client.async_client, batch, options.ledger, grace=1e-3)
            )
        assert log.collect_orphans() == 0  # within the default grace period: kept
        assert _unlinked_sink_ledgers(client, log_name) == [left.ledgers[0].ledger_id]
        later = time.time() + DEFAULT_ORPHAN_GRACE + 1
        deleted = client.loop_thread.run(
            collect_sink_orphans(client.async_client, log_name, now=later)
        )
        assert deleted == 1 and _unlinked_sink_ledgers(client, log_name) == []
        assert log.metadata().ledger_ids == []


def test_ledgers_created_out_of_partition_order_are_copied_so_ids_ascend_along_the_log(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    options = WriteOptions.parse(
        {"metadata": cluster.metadata_uri, "log": log_name}, streaming=False
    )
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        # Partition 1's task created its ledger first; partition 2's comes last anyway.
        p1 = write_partition(options, "txn-order", 0, _arrow(7, "p1"))
        p0 = write_partition(options, "txn-order", 0, _arrow(5, "p0"))
        p2 = write_partition(options, "txn-order", 0, _arrow(3, "p2"))
        messages = [
            SinkMessage(0, p0.ledgers),
            SinkMessage(1, p1.ledgers),
            SinkMessage(2, p2.ledgers),
        ]
        assert commit_batch(options, "txn-order", 0, messages)
        ids = log.metadata().ledger_ids
        assert ids == sorted(ids) and ids[0] == p0.ledgers[0].ledger_id
        assert p1.ledgers[0].ledger_id not in client.list_ledgers()  # the original, copied
        assert _unlinked_sink_ledgers(client, log_name) == []
        with log.open_reader() as reader:
            records = [reader.read_next(timeout=10) for _ in range(15)]
    expected = [f"p{p}-{i:03d}".encode() for p, n in ((0, 5), (1, 7), (2, 3)) for i in range(n)]
    assert [r.data for r in records if r] == expected
    positions = [r.position for r in records if r]
    assert positions == sorted(positions)

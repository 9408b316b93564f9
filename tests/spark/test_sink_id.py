"""A stream sink's ``sinkId`` on a real local Spark and real bookies: the log's record of it
belongs to one query (one checkpoint); another query is refused unless it resets it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

import walog
from tests.spark.test_sink import _frame, _log_rows, _save, _unlinked_sink_ledgers
from walog.spark.options import WriteOptions
from walog.testing import LocalCluster

# Each test runs several stream queries, a minute each on a loaded machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def _records(first: int, stop: int) -> list[bytes]:
    return [f"in-{i:03d}".encode() for i in range(first, stop)]


def _append(client: walog.Client, log: str, first: int, stop: int) -> None:
    with client.open_log(log).open_writer() as writer:
        for record in _records(first, stop):
            writer.append_async(record)


def _copy(
    spark: SparkSession, uri: str, source: str, target: str, checkpoint: Path, **options: str
) -> StreamingQuery:
    """Start copying ``source`` into ``target`` (sink id ``copy``), 20 records a batch."""
    writer = (
        spark.readStream.format("walog").option("metadata", uri).option("log", source)
        .option("maxRecordsPerTrigger", "20").load().select("data")
        .writeStream.format("walog").option("metadata", uri).option("log", target)
        .option("sinkId", "copy").option("checkpointLocation", str(checkpoint))
    )  # fmt: skip
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.trigger(availableNow=True).start()


def _run(query: StreamingQuery) -> None:
    assert query.awaitTermination(180)
    assert query.exception() is None


def _forget_last_commit(checkpoint: Path) -> int:
    """What a driver that died after the sink's CAS of its last batch leaves: Spark did not
    record the batch as done, so a restart runs it again. Returns its batch id."""
    commits = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    return int(last.name)


def test_a_sink_id_reused_with_a_fresh_checkpoint_is_refused(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri, source, target = cluster.metadata_uri, log_name, f"{log_name}-out"
    with walog.connect(uri) as client:
        _append(client, source, 0, 50)
        _run(_copy(spark, uri, source, target, tmp_path / "first"))  # batches 0, 1, 2
        before = client.open_log(target).metadata()
        _append(client, source, 50, 70)
        # A new checkpoint numbers its batches from 0 again: 0-2 are not the first's 0-2.
        query = _copy(spark, uri, source, target, tmp_path / "fresh")
        with pytest.raises(StreamingQueryException) as refused:
            query.awaitTermination(180)
        message = str(refused.value)
        for part in (f"log '{target}'", "sink id 'copy'", "up to 2", "resetSinkId=true"):
            assert part in message
        after = client.open_log(target).metadata()
        assert after.sinks == before.sinks == {"copy": 2}
        assert after.sink_queries == before.sink_queries
        assert after.ledger_ids == before.ledger_ids
        assert _unlinked_sink_ledgers(client, target) == []
    assert _log_rows(spark, uri, target) == _records(0, 50)


@pytest.mark.slow  # two stream queries; the reset rules themselves: tests/unit/log/test_sink.py
def test_reset_sink_id_starts_the_sink_id_over_from_a_fresh_checkpoints_batches(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri, source, target = cluster.metadata_uri, log_name, f"{log_name}-out"
    first, fresh = tmp_path / "first", tmp_path / "fresh"
    with walog.connect(uri) as client:
        _append(client, source, 0, 50)
        _run(_copy(spark, uri, source, target, first))
        _append(client, source, 50, 70)
        with pytest.raises(StreamingQueryException, match="resetSinkId=true"):
            _copy(spark, uri, source, target, fresh).awaitTermination(180)
        # The refused query, restarted from its checkpoint with the option, runs its batch 0
        # again and links every batch of its own.
        _run(_copy(spark, uri, source, target, fresh, resetSinkId="true"))
        meta = client.open_log(target).metadata()
        assert meta.sinks == {"copy": 3} and set(meta.sink_queries) == {"copy"}
        # The sink id is the new query's now: the first query is refused in turn.
        with pytest.raises(StreamingQueryException, match="sink id 'copy'"):
            _copy(spark, uri, source, target, first).awaitTermination(180)
        assert client.open_log(target).metadata().sinks == {"copy": 3}
        assert _unlinked_sink_ledgers(client, target) == []
    assert _log_rows(spark, uri, target) == _records(0, 50) + _records(0, 70)


def test_a_retry_of_the_last_linked_batch_is_linked_once_with_reset_sink_id_still_set(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri, source, target = cluster.metadata_uri, log_name, f"{log_name}-out"
    checkpoint = tmp_path / "checkpoint"
    with walog.connect(uri) as client:
        _append(client, source, 0, 50)
        _run(_copy(spark, uri, source, target, checkpoint, resetSinkId="true"))
        last = _forget_last_commit(checkpoint)
        assert client.open_log(target).metadata().sinks == {"copy": last}
        _append(client, source, 50, 70)
        # The restart runs batch ``last`` again: the record is this query's own, so the
        # option keeps it and the batch links nothing; the next batch links.
        _run(_copy(spark, uri, source, target, checkpoint, resetSinkId="true"))
        assert client.open_log(target).metadata().sinks == {"copy": last + 1}
        assert _unlinked_sink_ledgers(client, target) == []
    assert _log_rows(spark, uri, target) == _records(0, 70)


def test_a_batch_job_below_its_sink_ids_last_batch_is_refused_unless_it_resets_it(
    spark: SparkSession, cluster: LocalCluster, log_name: str
) -> None:
    uri = cluster.metadata_uri
    _save(_frame(spark, 10, 2, tag="five"), uri, log_name, sinkId="nightly", batchId="5")
    # Job 3 after job 5: nothing tells whether job 3 was ever linked.
    with pytest.raises(Exception, match="batch 3 is below it"):
        _save(_frame(spark, 10, 2, tag="three"), uri, log_name, sinkId="nightly", batchId="3")
    with walog.connect(uri) as client:
        assert client.open_log(log_name).metadata().sinks == {"nightly": 5}
        assert _unlinked_sink_ledgers(client, log_name) == []
    ids = {"sinkId": "nightly", "batchId": "3"}
    _save(_frame(spark, 10, 2, tag="three"), uri, log_name, resetSinkId="true", **ids)
    _save(_frame(spark, 10, 2, tag="again"), uri, log_name, **ids)  # a rerun of job 3
    with walog.connect(uri) as client:
        assert client.open_log(log_name).metadata().sinks == {"nightly": 3}
        assert _unlinked_sink_ledgers(client, log_name) == []
    rows = _log_rows(spark, uri, log_name)
    assert sorted(rows[:10]) == [f"five-{i:05d}".encode() for i in range(10)]
    assert sorted(rows[10:]) == [f"three-{i:05d}".encode() for i in range(10)]


def test_reset_sink_id_is_a_flag_of_a_sink_id() -> None:
    target = {"metadata": "sqlite:///x.db", "log": "orders"}
    with pytest.raises(ValueError, match="resetSinkId needs option sinkId"):
        WriteOptions.parse({**target, "resetSinkId": "true"}, streaming=False)
    with pytest.raises(ValueError, match="resetSinkId='yes': expected 'true' or 'false'"):
        WriteOptions.parse({**target, "sinkId": "a", "resetSinkId": "yes"}, streaming=True)
    parsed = WriteOptions.parse({**target, "sinkId": "a", "ResetSinkId": "TRUE"}, streaming=True)
    assert parsed.reset_sink_id

"""Positions by time on a real local Spark: ``position_at`` answers from the archive as
the bookies did before the range moved there, and the data source's ``startingTimestamp``
(batch and streaming)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import walog
from tests.spark.streams import stream_available_now
from tests.spark.test_spark import _load, _open, _rows
from walog.log.position import Position, Record
from walog.log.time_search import micros
from walog.spark.archive import archive_log
from walog.spark.options import ReadOptions
from walog.testing import LocalCluster

# The first test starts the Spark session; archiving starts Spark jobs on a busy machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(420)]

BASE = 1_700_000_000.0


def _ticks(step: float) -> Iterator[float]:
    """Timestamps ``step`` apart with sub-microsecond parts, each given twice (ties)."""
    i = 0
    while True:
        yield BASE + (i // 2) * step
        i += 1


def _write(log: walog.Log, count: int, step: float) -> list[Record]:
    ticks = _ticks(step)
    with log.open_writer() as writer:
        writer.async_writer._clock = lambda: next(ticks)
        for i in range(count):
            writer.append(b"r%03d" % i)
            if i % 7 == 6:
                writer.roll()
    with log.open_reader() as reader:
        records = [reader.read_next(timeout=30) for _ in range(count)]
    return [r for r in records if r is not None]


def _expected(records: list[Record], t: float) -> Position | None:
    return next((r.position for r in records if micros(r.timestamp) >= micros(t)), None)


def test_position_at_answers_from_the_archive_as_the_bookies_did(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri = cluster.metadata_uri
    retention = walog.RetentionPolicy(max_age=1e-6, require_archived=True)
    rng = random.Random(5)
    with walog.connect(uri) as client:
        log = _open(client, log_name, retention=retention)
        records = _write(log, 60, 0.0100004)
        stamps = [r.timestamp for r in records]
        # Each query reads the archive's files again: a few dozen, not thousands.
        picked = rng.sample(stamps, 15)
        queries = [*picked, *(s - 4e-7 for s in picked), *(s + 4e-7 for s in picked)]
        queries += [rng.uniform(stamps[0] - 1, stamps[-1] + 1) for _ in range(15)]
        on_bookies = [log.position_at(t) for t in queries]
        assert on_bookies == [_expected(records, t) for t in queries]
        with log.open_writer():
            archive_log(spark, uri, log_name, tmp_path / "archive", progress=False)
            assert log.enforce_retention() >= 5
        meta = log.metadata()
        assert meta.truncated_through is not None
        archived = [p for p in on_bookies if p is not None and p < meta.truncated_through]
        assert len(archived) >= len(queries) // 2, "the queries should land in the archive"
        assert [log.position_at(t) for t in queries] == on_bookies


def test_starting_timestamp_starts_batch_and_streaming_reads_at_the_first_record_at_or_after_it(
    spark: SparkSession, cluster: LocalCluster, log_name: str, tmp_path: Path
) -> None:
    uri = cluster.metadata_uri
    with walog.connect(uri) as client:
        records = _write(_open(client, log_name), 40, 1.0)
    written = [(r.position, r.data) for r in records]
    # Records i and i + 1 share a second: the one at 10 s is record 20.
    at_ms = int((BASE + 10) * 1000)
    assert _rows(_load(spark, uri, log_name, startingTimestamp=at_ms)) == written[20:]
    assert _rows(_load(spark, uri, log_name, startingTimestamp=at_ms - 1)) == written[20:]
    assert _rows(_load(spark, uri, log_name, startingTimestamp=at_ms + 1)) == written[22:]
    assert _rows(_load(spark, uri, log_name, startingTimestamp=0)) == written
    assert _rows(_load(spark, uri, log_name, startingTimestamp=int(BASE * 1000) + 10**9)) == []
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream_available_now(
        spark, out, checkpoint, metadata=uri, log=log_name, startingTimestamp=str(at_ms)
    )
    streamed = sorted(_rows(spark.read.parquet(str(out))))
    assert streamed == written[20:]


@pytest.mark.parametrize("value", ["soon", "-1", "1.5"])
def test_a_starting_timestamp_that_is_not_whole_milliseconds_is_refused_naming_it(
    value: str,
) -> None:
    with pytest.raises(ValueError, match=r"startingTimestamp=.*milliseconds since the epoch"):
        ReadOptions.parse({"metadata": "sqlite:///x", "log": "l", "startingTimestamp": value})


def test_starting_timestamp_and_start_position_are_not_both_taken() -> None:
    with pytest.raises(ValueError, match="give one"):
        ReadOptions.parse(
            {"metadata": "m", "log": "l", "startingTimestamp": "1", "startPosition": "earliest"}
        )

"""A pipeline both ways: a service appends events, Spark streams them into a second log
exactly once, the archive job and retention keep the source log short, and a batch query
reads the tiered log from its first record.

    python examples/spark/pipeline.py --metadata URI --work DIR [--master spark://HOST:7077]

1. A service appends half of ``--events`` JSON events to log ``events``.
2. A streaming query (checkpointed in ``DIR/checkpoints``) reads ``events`` and writes each
   event, with its amount in cents added, to log ``events-enriched`` through the walog sink
   (``sinkId`` makes every micro-batch land once), up to the log's end; a second one
   aggregates them into per-user totals in Parquet (``DIR/stream-totals``).
3. The service appends the other half; the queries start again from their checkpoints, as
   after a driver restart, and take up where they stopped.
4. ``walog archive`` copies the closed ledgers of ``events`` to ``DIR/archive``; retention
   (``require_archived``) then deletes them from the bookies.
5. A batch query reads ``events`` from ``earliest``: the archived part comes from Parquet,
   the rest from the bookies. Totals per user go to ``DIR/totals`` (Parquet).

It prints one JSON summary line. Without ``--metadata`` it starts a local cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import walog
import walog.spark
from walog.spark.archive import archive_log, spark_session

SOURCE, TARGET = "events", "events-enriched"
EVENT_SCHEMA = "user string, amount long, seq long"


def service(metadata: str, first: int, end: int) -> None:
    """Append events ``first..end-1`` in bursts (records of a burst share entries; ledgers
    roll every 20 entries, so archiving has several to take)."""
    burst = max(1, (end - first) // 50)
    with walog.connect(metadata) as client:
        log = client.open_log(SOURCE, roll_policy=walog.RollPolicy(max_entries=20))
        with log.open_writer() as writer:
            for start in range(first, end, burst):
                futures = [
                    writer.append_async(
                        json.dumps({"user": f"u{i % 7}", "amount": i % 100, "seq": i}).encode()
                    )
                    for i in range(start, min(end, start + burst))
                ]
                for future in futures:
                    future.result(timeout=60)


def _reader(spark: SparkSession, metadata: str, log: str) -> Any:
    return spark.readStream.format("walog").option("metadata", metadata).option("log", log)


def enrich(frame: DataFrame) -> DataFrame:
    """Each event as JSON again, with ``cents`` added: one ``data`` column for the sink."""
    event = F.from_json(F.col("data").cast("string"), EVENT_SCHEMA)
    return frame.select(
        F.to_json(
            F.struct(
                event.user.alias("user"),
                event.seq.alias("seq"),
                (event.amount * 100).alias("cents"),
            )
        ).alias("data")
    )


def stream_once(spark: SparkSession, metadata: str, work: Path, per_trigger: int) -> int:
    """Run the enrich query over what ``events`` holds now; return its micro-batches."""
    query = (
        enrich(_reader(spark, metadata, SOURCE).option("maxRecordsPerTrigger", per_trigger).load())
        .writeStream.format("walog")
        .option("metadata", metadata)
        .option("log", TARGET)
        .option("sinkId", "enrich")
        .option("checkpointLocation", str(work / "checkpoints" / "enrich"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"enrich query failed: {query.exception()}")
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def aggregate_once(spark: SparkSession, metadata: str, work: Path, per_trigger: int) -> None:
    """Stream ``events`` into per-user totals, one Parquet directory per micro-batch.

    Each micro-batch overwrites ``DIR/stream-totals/batch=<id>``, so a batch Spark runs again
    after a restart replaces its own output: every event is counted once.
    """
    out = work / "stream-totals"

    def write(frame: DataFrame, batch_id: int) -> None:
        event = F.from_json(F.col("data").cast("string"), EVENT_SCHEMA)
        by_user = frame.select(event.alias("e")).groupBy("e.user")
        totals = by_user.agg(F.count("*").alias("events"), F.sum("e.amount").alias("amount"))
        totals.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    query = (
        _reader(spark, metadata, SOURCE)
        .option("maxRecordsPerTrigger", per_trigger)
        .load()
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", str(work / "checkpoints" / "totals"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"totals query failed: {query.exception()}")


def _scalar(frame: DataFrame) -> Any:
    row = frame.first()
    assert row is not None
    return row[0]


def run(
    spark: SparkSession, metadata: str, work: Path, events: int, per_trigger: int
) -> dict[str, Any]:
    """The whole pipeline; returns the summary."""
    walog.spark.register(spark)
    half = events // 2
    service(metadata, 0, half)
    batches = stream_once(spark, metadata, work, per_trigger)
    aggregate_once(spark, metadata, work, per_trigger)
    service(metadata, half, events)  # a new writer takes over the log, as after a redeploy
    (work / "stream-restarting").touch()  # tests watch for it
    batches += stream_once(spark, metadata, work, per_trigger)  # restarted from the checkpoint
    aggregate_once(spark, metadata, work, per_trigger)
    enriched = spark.read.format("walog").option("metadata", metadata).option("log", TARGET).load()
    seqs = enriched.select(
        F.get_json_object(F.col("data").cast("string"), "$.seq").cast("long").alias("seq")
    )
    with walog.connect(metadata) as client:
        retention = walog.RetentionPolicy(max_age=1e-6, require_archived=True)
        log = client.open_log(SOURCE, retention=retention)
        with log.open_writer():  # closes the service's last ledger, so it is archivable
            archived = archive_log(spark, metadata, SOURCE, work / "archive", progress=False)
            deleted = log.enforce_retention()
            left = len(log.segments())
    tiered = spark.read.format("walog").option("metadata", metadata).option("log", SOURCE).load()
    totals = (
        tiered.select(F.from_json(F.col("data").cast("string"), EVENT_SCHEMA).alias("e"))
        .groupBy("e.user")
        .agg(F.count("*").alias("events"), F.sum("e.amount").alias("amount"))
    )
    totals.write.mode("overwrite").parquet(str(work / "totals"))
    return {
        "events": events,
        "micro_batches": batches,
        "enriched": seqs.count(),
        "enriched_distinct": seqs.distinct().count(),
        "enriched_min_seq": _scalar(seqs.agg(F.min("seq"))),
        "enriched_max_seq": _scalar(seqs.agg(F.max("seq"))),
        "archived_ledgers": len(archived.ledger_ids),
        "deleted_ledgers": deleted,
        "ledgers_left": left,
        "tiered_read": tiered.count(),
        "stream_total_events": _scalar(
            spark.read.parquet(str(work / "stream-totals")).agg(F.sum("events"))
        ),
        "total_events": _scalar(spark.read.parquet(str(work / "totals")).agg(F.sum("events"))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", help="metadata URI (default: a demo local cluster)")
    parser.add_argument("--work", type=Path, required=True, help="checkpoints, archive, totals")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--per-trigger", type=int, default=1000, help="maxRecordsPerTrigger")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.metadata is None:
        from walog.testing import LocalCluster

        with LocalCluster(bookies=3) as cluster:
            return _main(args, cluster.metadata_uri)
    return _main(args, args.metadata)


def _main(args: argparse.Namespace, metadata: str) -> int:
    spark = spark_session(args.master, "walog-pipeline")
    try:
        summary = run(spark, metadata, args.work, args.events, args.per_trigger)
    finally:
        spark.stop()
    print(json.dumps(summary, sort_keys=True))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Batch scan and sink throughput of the ``walog`` data source, on a local Spark and on a
standalone cluster.

``walog bench`` runs this module (:func:`scan_mb_s`, :func:`sink_mb_s`,
:func:`standalone_sink_mb_s`); it can also run alone::

    python -m walog.spark.bench --total-mb 64
    python -m walog.spark.bench --metadata URI --sink --standalone-workers 2
"""

from __future__ import annotations

import argparse
import concurrent.futures
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from walog.client import connect
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.log.writer import LogWriterConfig
from walog.spark import register
from walog.spark.archive import prepare_environment, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MB = 1_000_000
_WINDOW = 512  # appends in flight while filling the log


def fill_log(
    metadata_uri: str, log: str, *, total_mb: float, record_bytes: int, ledger_mb: float = 16.0
) -> int:
    """Append ``total_mb`` of ``record_bytes`` records to ``log``, rolling ledgers every
    ``ledger_mb``; return the payload bytes written."""
    payload = bytes(range(256)) * (record_bytes // 256) + bytes(record_bytes % 256)
    count = max(1, int(total_mb * MB) // record_bytes)
    with connect(metadata_uri) as client:
        handle = client.open_log(
            log,
            ensemble_size=3,
            write_quorum=2,
            ack_quorum=2,
            roll_policy=RollPolicy(max_bytes=int(ledger_mb * MB)),
            writer_config=LogWriterConfig(linger=0.002),
        )
        with handle.open_writer() as writer:
            inflight: list[concurrent.futures.Future[Position]] = []
            for _ in range(count):
                inflight.append(writer.append_async(payload))
                if len(inflight) >= _WINDOW:
                    for future in inflight:
                        future.result()
                    inflight.clear()
            for future in inflight:
                future.result()
    return count * record_bytes


def _scan_seconds(spark: SparkSession, metadata_uri: str, log: str) -> tuple[float, int]:
    """Wall time of one full scan and the payload bytes it read.

    ``sum(length(data))`` needs every record's payload: a Python data source has no column
    pruning, so every row crosses from the Python workers to the JVM with all five columns,
    and the aggregate reads each ``data`` value.
    """
    frame = spark.read.format("walog").option("metadata", metadata_uri).option("log", log).load()
    started = time.perf_counter()
    row = frame.selectExpr("sum(length(data)) AS bytes", "count(*) AS n").collect()[0]
    return time.perf_counter() - started, int(row["bytes"] or 0)


def scan_mb_s(
    metadata_uri: str | None = None,
    *,
    log: str | None = None,
    total_mb: float = 64.0,
    record_bytes: int = 4096,
    spark: SparkSession | None = None,
    master: str = "local[2]",
    warmup: int = 2,
    repeats: int = 3,
) -> float:
    """Batch scan throughput in MB/s (10^6 bytes of record payload per second).

    Args:
        metadata_uri: a running cluster; None starts a 3-bookie ``LocalCluster`` for the run.
        log: an existing log to scan; None writes a fresh one of ``total_mb`` first.
        total_mb: payload megabytes to write when ``log`` is None.
        record_bytes: size of each written record.
        spark: a session to use; None starts one on ``master`` (stopped afterwards).
        master: Spark master when starting a session.
        warmup: scans run first and not counted: the first starts Spark's Python workers
            (seconds), and the JVM compiles the scan's code paths over the next ones.
        repeats: scans counted after the warm-up; the fastest counts (the machine may be
            shared, and interference only ever slows a scan down).

    Returns:
        Payload bytes read divided by the wall time of the scan query, in MB/s.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if metadata_uri is None:
        from walog.testing import LocalCluster

        with LocalCluster(bookies=3) as cluster:
            return scan_mb_s(
                cluster.metadata_uri,
                log=log,
                total_mb=total_mb,
                record_bytes=record_bytes,
                spark=spark,
                master=master,
                warmup=warmup,
                repeats=repeats,
            )
    if log is None:
        log = f"spark-scan-{uuid.uuid4().hex[:8]}"
        fill_log(metadata_uri, log, total_mb=total_mb, record_bytes=record_bytes)
    session = spark or spark_session(master, "walog-scan-bench")
    try:
        register(session)
        for _ in range(warmup):
            _scan_seconds(session, metadata_uri, log)
        best = 0.0
        for _ in range(repeats):
            seconds, size = _scan_seconds(session, metadata_uri, log)
            best = max(best, size / MB / seconds)
        return best
    finally:
        if spark is None:
            session.stop()


def _sink_seconds(spark: SparkSession, metadata_uri: str, count: int, record_bytes: int) -> float:
    """Wall time of one batch write of ``count`` records into a fresh log (4 partitions)."""
    from pyspark.sql import functions as F

    frame = spark.range(count, numPartitions=4).select(
        F.expr(f"CAST(repeat('x', {record_bytes}) AS BINARY)").alias("data")
    )
    log = f"spark-sink-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    (
        frame.write.format("walog")
        .option("metadata", metadata_uri)
        .option("log", log)
        .option("ensembleSize", "3")
        .option("writeQuorum", "2")
        .option("ackQuorum", "2")
        .mode("append")
        .save()
    )
    return time.perf_counter() - started


def sink_mb_s(
    metadata_uri: str,
    *,
    total_mb: float = 64.0,
    record_bytes: int = 4096,
    spark: SparkSession | None = None,
    master: str = "local[2]",
    warmup: int = 1,
    repeats: int = 2,
) -> float:
    """Batch sink throughput in MB/s: record payload bytes of a ``df.write.format("walog")``
    job (4 tasks writing ledgers, then the commit linking them) per second of its wall time.
    The fastest of ``repeats`` writes after ``warmup`` uncounted ones counts."""
    count = max(1, int(total_mb * MB) // record_bytes)
    session = spark or spark_session(master, "walog-sink-bench")
    try:
        register(session)
        for _ in range(warmup):
            _sink_seconds(session, metadata_uri, count, record_bytes)
        best = 0.0
        for _ in range(max(1, repeats)):
            seconds = _sink_seconds(session, metadata_uri, count, record_bytes)
            best = max(best, count * record_bytes / MB / seconds)
        return best
    finally:
        if spark is None:
            session.stop()


def standalone_sink_mb_s(
    metadata_uri: str,
    *,
    workers: int = 2,
    total_mb: float = 64.0,
    record_bytes: int = 4096,
    warmup: int = 1,
    repeats: int = 2,
) -> float:
    """:func:`sink_mb_s` on a standalone cluster started for the run: a master and
    ``workers`` workers of one core each (:class:`~walog.testing.StandaloneSpark`, in a
    temporary directory), the driver in this process. Every write's 4 tasks run in
    executors of their own JVMs and Python workers, as on a real cluster."""
    from pyspark.sql import SparkSession

    from walog.testing import StandaloneSpark

    with (
        tempfile.TemporaryDirectory(prefix="walog-spark-bench-") as work,
        StandaloneSpark(Path(work), workers=workers) as standalone,
    ):
        prepare_environment()
        session = (
            SparkSession.builder.master(standalone.master_url)
            .appName("walog-sink-bench-standalone")
            # Executors reach the driver where the cluster listens.
            .config("spark.driver.host", standalone.MASTER_HOST)
            .config("spark.driver.bindAddress", standalone.MASTER_HOST)
            .config("spark.executor.memory", "768m")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        try:
            return sink_mb_s(
                metadata_uri,
                total_mb=total_mb,
                record_bytes=record_bytes,
                spark=session,
                warmup=warmup,
                repeats=repeats,
            )
        finally:
            session.stop()


def _standalone_line(args: argparse.Namespace) -> str:
    """The standalone sink's result line, or why it could not be measured (the other
    figures of the run stand either way)."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    from walog.errors import WalogError
    from walog.testing.spark import StandaloneSparkError

    label = f"spark sink, standalone cluster ({args.standalone_workers} workers)"
    try:
        rate = standalone_sink_mb_s(
            args.metadata,
            workers=args.standalone_workers,
            total_mb=args.total_mb,
            record_bytes=args.record_bytes,
        )
    except (StandaloneSparkError, PySparkException, Py4JError, WalogError, OSError) as exc:
        reason = " ".join(str(exc).split())[:200]
        return f"{label}: failed: {type(exc).__name__}: {reason}"
    return f"{label}: {rate:.1f} MB/s (fastest of 2 writes after 1 warm-up write)"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the measured scan throughput, then the sink's (``--sink``) on the same master
    and on a standalone cluster (``--standalone-workers``)."""
    parser = argparse.ArgumentParser(prog="python -m walog.spark.bench")
    parser.add_argument("--metadata", default=None, help="cluster (default: a local one)")
    parser.add_argument("--log", default=None, help="log to scan (default: write one)")
    parser.add_argument("--total-mb", type=float, default=64.0)
    parser.add_argument("--record-bytes", type=int, default=4096)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted scans first [2]")
    parser.add_argument("--repeats", type=int, default=3, help="counted scans, fastest wins [3]")
    parser.add_argument("--sink", action="store_true", help="also time the sink (a cluster)")
    parser.add_argument(
        "--standalone-workers",
        type=int,
        default=0,
        metavar="N",
        help="with --sink: also time it on a standalone cluster of N one-core workers [0: no]",
    )
    args = parser.parse_args(argv)
    if args.sink and args.metadata is None:
        parser.error("--sink needs --metadata")
    if args.standalone_workers and not args.sink:
        parser.error("--standalone-workers times the sink: add --sink")
    if args.standalone_workers < 0:
        parser.error(f"--standalone-workers must be >= 0, got {args.standalone_workers}")
    rate = scan_mb_s(
        args.metadata,
        log=args.log,
        total_mb=args.total_mb,
        record_bytes=args.record_bytes,
        master=args.master,
        warmup=args.warmup,
        repeats=args.repeats,
    )
    print(
        f"spark batch scan: {rate:.1f} MB/s "
        f"(fastest of {args.repeats} scans after {args.warmup} warm-up scans)",
        flush=True,
    )
    if args.sink:
        sink = sink_mb_s(args.metadata, total_mb=args.total_mb, record_bytes=args.record_bytes,
                         master=args.master)  # fmt: skip
        print(
            f"spark sink: {sink:.1f} MB/s (fastest of 2 writes after 1 warm-up write)", flush=True
        )
    if args.standalone_workers:
        print(_standalone_line(args), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["fill_log", "scan_mb_s", "sink_mb_s", "standalone_sink_mb_s"]

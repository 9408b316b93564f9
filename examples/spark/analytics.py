"""Records per minute over a walog log, with a matplotlib plot.

    python examples/spark/analytics.py --metadata sqlite:///var/lib/walog/meta.db \\
        --log orders --out orders-per-minute.png

Without ``--metadata`` it starts a local cluster, writes a demo log spread over a few
minutes of (synthetic) writer time, and plots that.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import walog
import walog.spark
from walog.spark.archive import spark_session


def counts_per_minute(spark: SparkSession, metadata: str, log: str) -> DataFrame:
    """Rows ``minute timestamp, records long, bytes long``, oldest minute first."""
    walog.spark.register(spark)
    frame = spark.read.format("walog").option("metadata", metadata).option("log", log).load()
    return (
        frame.groupBy(F.date_trunc("minute", "timestamp").alias("minute"))
        .agg(F.count("*").alias("records"), F.sum(F.length("data")).alias("bytes"))
        .orderBy("minute")
    )


def plot(rows: list[tuple[datetime.datetime, int]], title: str, out: Path) -> None:
    """A bar chart of records per minute, written to ``out`` (PNG)."""
    minutes = mdates.date2num([m for m, _ in rows])  # type: ignore[no-untyped-call]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(minutes, [n for _, n in rows], width=1 / 24 / 60 * 0.9)
    ax.xaxis_date()
    ax.set_title(title)
    ax.set_xlabel("minute (UTC)")
    ax.set_ylabel("records")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _demo_log(metadata: str, log: str) -> None:
    """Write a demo log over several ledgers (timestamps are the writer's clock, so a demo
    written in seconds fills one or two minutes of the plot)."""
    with walog.connect(metadata) as client:
        handle = client.open_log(log, roll_policy=walog.RollPolicy(max_entries=50))
        with handle.open_writer() as writer:
            futures = [writer.append_async(f"event {i}".encode()) for i in range(5000)]
            for future in futures:
                future.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", help="metadata URI (default: a demo local cluster)")
    parser.add_argument("--log", default="analytics-demo")
    parser.add_argument("--out", type=Path, default=Path("records-per-minute.png"))
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.metadata is None:
        from walog.testing import LocalCluster

        with LocalCluster(bookies=3) as cluster:
            _demo_log(cluster.metadata_uri, args.log)
            return _run(args.master, cluster.metadata_uri, args.log, args.out)
    return _run(args.master, args.metadata, args.log, args.out)


def _run(master: str, metadata: str, log: str, out: Path) -> int:
    spark = spark_session(master, "walog-analytics")
    try:
        rows = [
            (r["minute"], r["records"]) for r in counts_per_minute(spark, metadata, log).collect()
        ]
    finally:
        spark.stop()
    for minute, records in rows:
        print(f"{minute:%Y-%m-%d %H:%M}  {records}")
    plot(rows, f"records per minute in log {log!r}", out)
    print(f"plot written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

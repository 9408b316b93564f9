"""Driver of a sink job with speculative execution, for a standalone cluster (run by
test_standalone.py in a process of its own).

``python -m tests.spark.speculative_sink --master URL --metadata URI --log NAME`` writes
``--rows`` rows ``row-NNNNNN`` in ``--partitions`` partitions through
``df.write.format("walog")``. The first attempt of partition ``--slow-partition`` stalls
(up to ``--stall`` seconds) before handing on its rows, so Spark launches a speculative
copy of it on the other worker; the copy finishes, Spark keeps its report and kills the
original, whose ledger the commit must delete. Prints one JSON line: what the driver's
REST API says about the job's task attempts, and two ledger ids allocated just before and
just after the job (every ledger its attempts created lies between them).
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import walog
import walog.spark


def _stall_first_attempt(
    partition: int, seconds: float
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == partition and ctx.attemptNumber() == 0:
            # Stalls until Spark kills this attempt (its speculative copy won) or the
            # time is up (no copy ran: the test fails on the REST API's answer).
            time.sleep(seconds)
        yield from batches

    return run


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def _write_stage_tasks(ui: str, app: str, deadline: float) -> list[dict[str, Any]]:
    """The job's task attempts once a speculative one has succeeded or none is running
    (the REST API follows the scheduler through the listener bus, a moment late)."""
    while True:
        stages = _get(f"{ui}/api/v1/applications/{app}/stages?details=true")
        tasks = [t for s in stages for t in (s.get("tasks") or {}).values()]
        running = any(t["status"] == "RUNNING" for t in tasks)
        speculated = any(t["speculative"] and t["status"] == "SUCCESS" for t in tasks)
        if (tasks and not running) or speculated or time.monotonic() > deadline:
            return tasks
        time.sleep(0.2)  # polling the driver's REST API: Python sees no listener events


def _probe_ledger(client: walog.Client) -> int:
    """A ledger id allocated now (the ledger is deleted at once)."""
    writer = client.create_ledger(1, 1, 1)
    writer.close()
    client.delete_ledger(writer.ledger_id)
    return writer.ledger_id


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", required=True)
    parser.add_argument("--metadata", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--ui-port", type=int, required=True)
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--slow-partition", type=int, default=0)
    parser.add_argument("--stall", type=float, default=60.0)
    args = parser.parse_args()

    spark = (
        SparkSession.builder.master(args.master)
        .appName("walog-speculative-sink")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.port", str(args.ui_port))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "512m")
        # Short-lived JVMs: C1 alone compiles enough and leaves the cores to the job.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        # Speculate as soon as one task is done and another has run longer than it did.
        .config("spark.speculation", "true")
        .config("spark.speculation.interval", "100ms")
        .config("spark.speculation.multiplier", "1")
        .config("spark.speculation.quantile", "0.1")
        .config("spark.speculation.minTaskRuntime", "0")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    walog.spark.register(spark)
    schema = "data binary"
    frame = (
        spark.range(args.rows, numPartitions=args.partitions)
        .select(F.expr("CAST(format_string('row-%06d', id) AS BINARY)").alias("data"))
        .mapInArrow(_stall_first_attempt(args.slow_partition, args.stall), schema)
    )
    with walog.connect(args.metadata) as client:
        before = _probe_ledger(client)
        started = time.monotonic()
        (
            frame.write.format("walog")
            .option("metadata", args.metadata)
            .option("log", args.log)
            .option("linkOrder", "written")  # no copies at the commit: ids account for attempts
            .mode("append")
            .save()
        )
        seconds = time.monotonic() - started
        after = _probe_ledger(client)
    ui = f"http://127.0.0.1:{args.ui_port}"
    tasks = _write_stage_tasks(ui, spark.sparkContext.applicationId, time.monotonic() + 30)
    spark.stop()
    summary = {
        "seconds": seconds,
        "ledger_ids_between": [before, after],
        "tasks": [
            {
                "index": t["index"],
                "attempt": t["attempt"],
                "speculative": t["speculative"],
                "status": t["status"],
                "host": t["host"],
            }
            for t in tasks
        ],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

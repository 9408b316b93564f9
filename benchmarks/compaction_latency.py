"""Append latency while bookies compact: ``python benchmarks/compaction_latency.py``.

A local cluster of three bookies with small entry logs. Fifty ledgers are written
interleaved and closed, then one writer appends one entry at a time to a ledger of its
own, first for ``--seconds`` with nothing else going on (baseline), then for as long
while 45 of the 50 ledgers are deleted and every bookie's GC and minor compaction give the
space back at ``--rate`` bytes per second. Prints the writer's p50, p99 and max latency of
both periods and how much compaction copied (the bookies' counters), as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from walog.testing import LocalCluster


def _latencies(writer, seconds: float) -> list[float]:  # type: ignore[no-untyped-def]
    out: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        writer.append(b"x" * 1024)
        out.append((time.perf_counter() - start) * 1000)
    return out


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "appends": len(ordered),
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)], 3),
        "max_ms": round(ordered[-1], 3),
    }


def _compacted(cluster: LocalCluster) -> int:
    """Compaction passes that copied something, over every bookie (their log lines)."""
    return sum(
        cluster.bookie(bookie_id).log().count('"entry logs compacted"')
        for bookie_id in cluster.bookie_ids
    )


def main() -> None:
    """Run the measurement and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per period [8]")
    parser.add_argument("--rate", type=int, default=32 << 20, help="compaction bytes/s [32 MiB]")
    args = parser.parse_args()
    bookie_args = [
        "--entry-log-file-bytes", str(4 << 20),
        "--checkpoint-interval-s", "0.5",
        "--gc-interval-s", "0.5", "--gc-grace-s", "0",
        "--minor-compaction-interval-s", "1", "--minor-compaction-threshold", "0.5",
        "--compaction-rate-bytes", str(args.rate),
    ]  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="walog-bench-compaction-") as scratch,
        LocalCluster(3, data_dir=scratch, bookie_args=bookie_args) as cluster,
    ):
        client = cluster.connect()
        with client:
            writers = [client.create_ledger(3, 3, 2) for _ in range(50)]
            payload = b"y" * (16 * 1024)
            futures = [w.append_async(payload) for _ in range(150) for w in writers]
            for future in futures:
                future.result(timeout=300)
            for writer in writers:
                writer.close()
            time.sleep(1.0)  # every bookie has checkpointed (--checkpoint-interval-s)
            with client.create_ledger(3, 3, 2) as probe:
                baseline = _latencies(probe, args.seconds)
                for writer in writers[5:]:
                    client.delete_ledger(writer.ledger_id)
                during = _latencies(probe, args.seconds)
            result = {
                "baseline": _summary(baseline),
                "during_gc_and_compaction": _summary(during),
                "compaction_passes_with_work": _compacted(cluster),
                "rate_bytes": args.rate,
            }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()

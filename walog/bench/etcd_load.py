"""Load generator for etcd, run in its own interpreter by :mod:`walog.bench.peers`.

The ``etcd3`` client ships protobuf code that only loads with the pure-Python protobuf
runtime (``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``); running it in a subprocess keeps
that slow runtime out of the benchmark's own process. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from walog.bench.stats import Latency, payload


def _client(endpoint: str) -> Any:
    import etcd3

    host, port = endpoint.rsplit(":", 1)
    return etcd3.client(host=host, port=int(port), timeout=10)


def _wait_healthy(endpoint: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _client(endpoint).put("bench/ready", b"1")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def measure(endpoints: Sequence[str], seconds: float, threads: int, size: int) -> dict[str, Any]:
    """1-in-flight put latency, then throughput with ``threads`` concurrent putters."""
    value = payload(size)
    _wait_healthy(endpoints[0], 30.0)
    single = _client(endpoints[0])
    latency = Latency()
    deadline = time.perf_counter() + seconds / 2
    n = 0
    while (now := time.perf_counter()) < deadline:
        single.put(f"bench/l/{n % 1000}", value)
        latency.record(time.perf_counter() - now)
        n += 1
    counts = [0] * threads
    stop = threading.Event()

    def put_loop(index: int) -> None:
        client = _client(endpoints[index % len(endpoints)])
        key = f"bench/t{index}/"
        while not stop.is_set():
            client.put(key + str(counts[index] % 1000), value)
            counts[index] += 1

    workers = [threading.Thread(target=put_loop, args=(i,), daemon=True) for i in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    time.sleep(seconds / 2)
    stop.set()
    for worker in workers:
        worker.join(30.0)
    elapsed = time.perf_counter() - started
    return {
        "put_ops": sum(counts) / elapsed,
        "threads": threads,
        "latency": latency.summary(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, measure, print the JSON result."""
    parser = argparse.ArgumentParser(prog="python -m walog.bench.etcd_load")
    parser.add_argument("--endpoints", required=True, help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args(argv)
    result = measure(args.endpoints.split(","), args.seconds, args.threads, args.size)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

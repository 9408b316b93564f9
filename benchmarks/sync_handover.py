"""Where a sync append's extra time goes: ``python benchmarks/sync_handover.py``.

One 1 KiB ``LedgerWriter.append`` in flight at a time (E3/Qw3/Qa2, PERSISTENT) on a local
three-bookie cluster, each split in three parts:

- *hand-over*: from the call until the event-loop thread starts the append (the caller
  queues it and wakes the loop, which was waiting in ``epoll``);
- *on the loop*: from there until the writer settles the caller's future (what an asyncio
  caller awaits);
- *wake-up back*: from then until the caller's thread runs again.

The first and the last are what the sync API adds over asyncio. Next to them: the same two
wake-ups with nothing else running (``walog.bench.floors.thread_handover_floor``, the
floor ``walog bench`` reports next to the sync API).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import walog
from walog._sinks import Sink
from walog.bench.floors import thread_handover_floor
from walog.testing import LocalCluster


class _Timed:
    """A sink that notes when the writer settles it, then settles the caller's future."""

    __slots__ = ("marks", "sink")

    def __init__(self, sink: Sink[int], marks: dict[str, float]) -> None:
        self.sink = sink
        self.marks = marks

    def done(self) -> bool:
        return self.sink.done()

    def set_result(self, result: int, /) -> None:
        self.marks["settled"] = time.perf_counter()
        self.sink.set_result(result)

    def set_exception(self, exception: BaseException, /) -> None:
        self.sink.set_exception(exception)


def _percentiles(samples: list[float]) -> str:
    samples = sorted(samples)
    p50, p99 = samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
    return f"p50 {p50 * 1e6:7.1f} us   p99 {p99 * 1e6:7.1f} us"


def measure_appends(seconds: float) -> dict[str, list[float]]:
    """The three parts of every sync append made in ``seconds``."""
    parts: dict[str, list[float]] = {"hand-over": [], "on the loop": [], "wake-up back": []}
    marks: dict[str, float] = {}
    data = b"x" * 1024
    with (
        LocalCluster(3) as cluster,
        walog.connect(cluster.metadata_uri) as client,
        client.create_ledger(3, 3, 2) as writer,
    ):
        # The writer's hand-over submits each append on the loop thread: time it there
        # (private attributes: this measures the private path itself).
        handoff = writer._handoff
        submit: Callable[[bytes, Sink[int]], None] = handoff._submit

        def timed_submit(payload: bytes, sink: Sink[int]) -> None:
            marks["started"] = time.perf_counter()
            submit(payload, _Timed(sink, marks))

        handoff._submit = timed_submit
        for _ in range(50):  # warm the streams to every bookie
            writer.append(data)
        deadline = time.perf_counter() + seconds
        while (called := time.perf_counter()) < deadline:
            writer.append(data)
            back = time.perf_counter()
            parts["hand-over"].append(marks["started"] - called)
            parts["on the loop"].append(marks["settled"] - marks["started"])
            parts["wake-up back"].append(back - marks["settled"])
    return parts


def main() -> None:
    """Parse arguments, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of appends")
    parser.add_argument("--idle", type=int, default=5000, help="idle round trips")
    args = parser.parse_args()
    parts = measure_appends(args.seconds)
    print(f"sync LedgerWriter.append, one in flight ({len(parts['hand-over'])} appends):")
    for name, samples in parts.items():
        print(f"  {name:13s} {_percentiles(samples)}")
    total = [sum(values) for values in zip(*parts.values(), strict=True)]
    print(f"  {'whole':13s} {_percentiles(total)}")
    there, back = thread_handover_floor(args.idle)
    print(f"the same wake-ups, nothing else running ({args.idle} round trips):")
    for name, floor in (("hand-over", there), ("wake-up back", back)):
        p50, p99 = floor.percentile_ms(50.0) * 1e3, floor.percentile_ms(99.0) * 1e3
        print(f"  {name:13s} p50 {p50:7.1f} us   p99 {p99:7.1f} us")


if __name__ == "__main__":
    main()

"""The pipelined log append in two modes, alternated: ``python benchmarks/log_append_modes.py``.

Starts a local cluster (3 bookies, SQLite metadata) and runs the benchmark's pipelined log
append (``walog.bench.scenarios.log_append``: 100 B records, 32,768 in flight) in this
process, alternating two modes run by run, and reports records/s, this process's CPU per
record, and the collections of each generation with the time they took (``gc.callbacks``):

- ``--compare gc`` (the default): the garbage collector as the interpreter starts it,
  against after ``gc.freeze()`` (what a service calls once it has started: the objects it
  made at start, its imports among them, leave the collector's passes). Every record is a
  future the caller holds until its entry is acknowledged, so the young generations fill at
  the rate of records and the survivors get promoted: the full collections that follow walk
  every object of the process, most of which were made at start.
- ``--compare codes``: the log writer's compiled record path (walog/log/_fastrecords.c)
  against its pure-Python twin, in the writer only (the bookies run compiled in both).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import walog.aio as aio
from walog.bench import scenarios
from walog.log import position, records
from walog.testing import LocalCluster


class Collections:
    """Collections per generation and the seconds they took, while installed."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.count[generation] += 1
        self.seconds[generation] += time.perf_counter() - self._started

    def summary(self) -> str:
        pairs = enumerate(zip(self.count, self.seconds, strict=True))
        return ", ".join(f"gen{g} {n} in {s:.3f} s" for g, (n, s) in pairs)


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """The objects made so far out of the collector's passes, for the block."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """The writer's pure-Python record path, for the block (what WALOG_PURE_PYTHON=1 would
    select at import, in this process only)."""
    saved = records._fast, position._fast
    records._fast = position._fast = None
    try:
        yield
    finally:
        records._fast, position._fast = saved


MODES = {
    "gc": (("default gc", contextlib.nullcontext), ("gc.freeze()", frozen)),
    "codes": (("compiled", contextlib.nullcontext), ("pure Python", pure_python)),
}
"""Per comparison, its two modes: a name and what the runs of that mode run inside."""


async def measure(uri: str, compare: str, seconds: float, rounds: int) -> None:
    """Alternate ``rounds`` runs of each mode, printing one line per run."""
    modes = MODES[compare]
    width = max(len(name) for name, _ in modes)
    async with await aio.connect(uri) as client:
        await scenarios.log_append(client, 2)  # warm up: connections, first ledger
        for index in range(2 * rounds):
            name, mode = modes[index % 2]
            collections = Collections()
            with mode():
                gc.callbacks.append(collections)
                before = resource.getrusage(resource.RUSAGE_SELF)
                rate = await scenarios.log_append(client, seconds)
                after = resource.getrusage(resource.RUSAGE_SELF)
                gc.callbacks.remove(collections)
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            print(
                f"{name:<{width}}: {rate.ops / rate.seconds:,.0f} records/s, "
                f"{cpu / rate.ops * 1e6:.2f} us CPU per record; collections: "
                f"{collections.summary()}",
                flush=True,
            )


def main() -> None:
    """Parse arguments, start the cluster, measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", choices=sorted(MODES), default="gc", help="which modes")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode")
    args = parser.parse_args()
    with LocalCluster(bookies=3) as cluster:
        asyncio.run(measure(cluster.metadata_uri, args.compare, args.seconds, args.rounds))


if __name__ == "__main__":
    main()

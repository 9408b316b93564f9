"""CPU time per record of the log writer's record path: ``python benchmarks/record_path_cpu.py``.

Runs what a log writer's event-loop thread does to every record besides taking the call:
gather it into an entry (``walog.log.records.new_batch``: ``fits``, ``add``, then ``encode``
once per entry), and once the entry is acknowledged resolve its future with its position
(``walog.log.position.resolve_positions``), over entries of ``--records`` records of
``--size`` bytes, and reports CPU seconds of this process per record, each step's and their
sum, from the best of ``--repeat`` runs (the one of least total). The code is what the writer
selects: compiled (walog/log/_fastrecords.c) when it is built, pure Python with
``WALOG_PURE_PYTHON=1``; ``--both`` measures the two in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _codes import add_both_flag, run_both

from walog.log import records
from walog.log.position import Position, resolve_positions


def measure(entries: int, per_entry: int, size: int) -> tuple[float, float]:
    """Microseconds of CPU per record of gathering ``entries`` entries of ``per_entry``
    records of ``size`` bytes, and of resolving their futures."""
    payload = b"x" * size
    loop = asyncio.new_event_loop()
    try:
        futures = [
            [asyncio.Future[Position](loop=loop) for _ in range(per_entry)] for _ in range(entries)
        ]
        gc.collect()
        gc.freeze()  # the futures stay alive: keep the collector's passes out of the figures
        start = time.process_time()
        for _ in range(entries):
            batch = records.new_batch(1 << 24, per_entry)
            for _ in range(per_entry):
                if batch.fits(size):
                    batch.add(1.5, payload)
            batch.encode()
        gathering = time.process_time() - start
        start = time.process_time()
        for entry_id, sinks in enumerate(futures):
            resolve_positions(sinks, 7, entry_id)
        resolving = time.process_time() - start
        gc.unfreeze()
    finally:
        loop.close()
    count = entries * per_entry
    return gathering * 1e6 / count, resolving * 1e6 / count


def main() -> None:
    """Parse arguments, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000, help="records per entry")
    parser.add_argument("--size", type=int, default=100, help="payload bytes per record")
    parser.add_argument("--entries", type=int, default=200, help="entries per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the best is reported")
    add_both_flag(parser, "path")
    args = parser.parse_args()
    if args.both:
        run_both(__file__)
        return
    runs = [measure(args.entries, args.records, args.size) for _ in range(args.repeat)]
    best = min(runs, key=sum)
    code = "compiled" if records.COMPILED else "pure Python"
    print(
        f"{code}: {args.entries * args.records} records of {args.size} bytes in entries of "
        f"{args.records} x {args.repeat} runs: best {sum(best):.3f} us CPU per record "
        f"(gather {best[0]:.3f} + resolve {best[1]:.3f}; runs: "
        f"{', '.join(f'{sum(r):.3f}' for r in runs)})"
    )


if __name__ == "__main__":
    main()

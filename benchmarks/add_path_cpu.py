"""CPU time per entry of a bookie's add-path checks: ``python benchmarks/add_path_cpu.py``.

Runs what the bookie's event-loop thread does to every add batch before it stores it:
unpack the packed batch (bookie.storage.fastpath.unpack_entries) and find the entries to refuse
(bookie.storage.fastpath.refused_entries: ids, lac, size, digest), over batches of valid entries,
and reports CPU seconds of this process per entry, each step's and their sum, from the
best of ``--repeat`` runs (the one of least total). The
code is what the bookie selects: compiled (bookie/storage/_fastadd.c) when it is built, pure
Python with ``WALOG_PURE_PYTHON=1``; ``--both`` measures the two in turn.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _codes import add_both_flag, run_both

from bookie.storage import fastpath
from walog.wire.digest import entry_digest
from walog.wire.packing import ENTRY_HEADER


def batches(count: int, entries: int, size: int) -> list[bytes]:
    """``count`` packed batches of ``entries`` entries of ``size`` bytes, ledger 1."""
    out = []
    for batch in range(count):
        first = batch * entries
        parts = []
        for entry_id in range(first, first + entries):
            data = entry_id.to_bytes(8, "big") * (size // 8) + b"x" * (size % 8)
            digest = entry_digest(1, entry_id, entry_id - 1, data)
            parts.append(ENTRY_HEADER.pack(entry_id, entry_id - 1, digest, len(data)) + data)
        out.append(b"".join(parts))
    return out


def measure(blobs: list[bytes], rounds: int, max_entry_bytes: int) -> tuple[float, float]:
    """Microseconds of CPU per entry of unpacking ``blobs`` and of checking their entries,
    ``rounds`` times each."""
    unpack, refused = fastpath.unpack_entries, fastpath.refused_entries
    unpacked = [unpack(blob) for blob in blobs]
    count = sum(len(entries) for entries, _ in unpacked)
    if any(problem is not None or refused(1, e, max_entry_bytes) for e, problem in unpacked):
        raise SystemExit("a valid batch was refused")
    # The batches and their entries stay alive throughout: keep them out of the cyclic
    # collector's passes, which would otherwise walk them over and over and be measured.
    gc.collect()
    gc.freeze()
    # The last batches' entries stay alive while the next ones are unpacked, as a bookie's
    # write cache keeps them: freed at once, they would end at the top of the heap, which the C
    # allocator hands back to the kernel and the next batch takes back page by page (about
    # as much CPU again as the unpacking, in either code).
    held: deque[object] = deque(maxlen=8)
    start = time.process_time()
    for _ in range(rounds):
        for blob in blobs:
            held.append(unpack(blob))
    unpacking = time.process_time() - start
    held.clear()
    start = time.process_time()
    for _ in range(rounds):
        for entries, _problem in unpacked:
            refused(1, entries, max_entry_bytes)
    checking = time.process_time() - start
    gc.unfreeze()
    return unpacking * 1e6 / (count * rounds), checking * 1e6 / (count * rounds)


def main() -> None:
    """Parse arguments, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=512, help="entries per batch")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per entry")
    parser.add_argument("--batches", type=int, default=64, help="distinct batches")
    parser.add_argument("--rounds", type=int, default=10, help="passes over them per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the best is reported")
    add_both_flag(parser, "checks")
    args = parser.parse_args()
    if args.both:
        run_both(__file__)
        return
    blobs = batches(args.batches, args.entries, args.size)
    runs = [measure(blobs, args.rounds, args.size) for _ in range(args.repeat)]
    best = min(runs, key=sum)
    code = "compiled" if fastpath.COMPILED else "pure Python"
    print(
        f"{code}: {args.batches * args.rounds * args.entries} entries of {args.size} bytes "
        f"in batches of {args.entries} x {args.repeat} runs: best {sum(best):.3f} us CPU "
        f"per entry (unpack {best[0]:.3f} + refused {best[1]:.3f}; runs: "
        f"{', '.join(f'{sum(r):.3f}' for r in runs)})"
    )


if __name__ == "__main__":
    main()

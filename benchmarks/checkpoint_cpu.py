"""CPU time per entry of a bookie checkpoint: ``python benchmarks/checkpoint_cpu.py``.

Drives :meth:`bookie.storage.entry_storage.EntryStorage.checkpoint` directly (entry-log
append, fsync, index rows, ledger rows and mark in one LMDB transaction) on a scratch directory and
reports user + system CPU seconds of this process per checkpointed entry, which
contention on a shared machine distorts far less than wall-clock time. The entries come as
the write cache holds them (bookie/storage/write_cache.py) after add batches of ``--batch``
entries: a large batch kept as it came, small ones copied onto the ledger's tail.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bookie.storage.entry_storage import EntryStorage
from bookie.storage.journal_files import JournalMark
from bookie.storage.ledger_state import LedgerState
from bookie.storage.write_cache import WriteCache, pack_unit
from walog.wire.digest import entry_digest


def measure(entries: int, ledgers: int, size: int, checkpoints: int, batch: int) -> float:
    """Microseconds of CPU per entry over ``checkpoints`` checkpoints of ``entries``, in
    units of ``batch`` entries."""
    data = b"x" * size
    per_ledger = entries // ledgers
    cpu = 0.0
    written = 0
    with tempfile.TemporaryDirectory() as scratch:
        storage = EntryStorage(Path(scratch), entry_log_file_bytes=512 << 20)
        try:
            for round_no in range(checkpoints):
                first = round_no * per_ledger
                cache = WriteCache()
                for ledger_id in range(1, ledgers + 1):
                    for low in range(first, first + per_ledger, batch):
                        unit = pack_unit(
                            (entry_id, entry_id - 1, digest, data)
                            for entry_id in range(low, min(low + batch, first + per_ledger))
                            for digest in (entry_digest(ledger_id, entry_id, entry_id - 1, data),)
                        )
                        assert isinstance(unit.blob, bytes)
                        cache.add_packed(ledger_id, unit.blob, unit.ids, unit.starts)
                states = {
                    ledger_id: LedgerState(
                        ledger_id, b"k" * 20, last_entry_id=first + per_ledger - 1
                    ).to_bytes()
                    for ledger_id in range(1, ledgers + 1)
                }
                start = time.process_time()
                written += storage.checkpoint(cache.pieces(), states, JournalMark(1, round_no))
                cpu += time.process_time() - start
        finally:
            storage.close()
    return cpu * 1e6 / written


def main() -> None:
    """Parse arguments, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20000, help="entries per checkpoint")
    parser.add_argument("--ledgers", type=int, default=8, help="ledgers they are spread over")
    parser.add_argument("--size", type=int, default=100, help="payload bytes per entry")
    parser.add_argument("--checkpoints", type=int, default=10, help="checkpoints to run")
    parser.add_argument("--batch", type=int, default=100, help="entries per unit (add batch)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported")
    args = parser.parse_args()
    runs = [
        measure(args.entries, args.ledgers, args.size, args.checkpoints, args.batch)
        for _ in range(args.repeat)
    ]
    print(
        f"{args.entries * args.checkpoints} entries in add batches of {args.batch} x {args.repeat} "
        "runs: "
        f"best {min(runs):.2f} us CPU per entry (runs: {', '.join(f'{r:.2f}' for r in runs)})"
    )


if __name__ == "__main__":
    main()

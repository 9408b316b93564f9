"""Time of a bookie's journal replay at start: ``python benchmarks/replay_time.py``.

Writes ``--mb`` MB of entries into a bookie's journal in add batches of ``--batch``
entries of ``--size`` bytes over ``--ledgers`` ledgers, with no checkpoint (the write cache
and the interval are made large enough), stops the store as a crash would, then opens it
``--repeat`` times with :func:`bookie.storage.replay.load_store` (the journal in the page
cache) and reports the wall-clock and CPU seconds of each opening and the replay rate. The
journal is replayed by the code the bookie selects (compiled unless
``WALOG_PURE_PYTHON=1``). ``--data-dir`` keeps the store to replay it again. ``--memory``
also reports, after the first opening, the write cache's entries, this process's resident
memory and the time of one full garbage collection (read it with ``--repeat 1`` in a
process that did not fill the store).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bookie.storage.config import StorageConfig
from bookie.storage.engine import BookieCore
from bookie.storage.replay import load_store
from walog.wire.digest import entry_digest
from walog.wire.durability import Durability
from walog.wire.packing import ENTRY_HEADER, unpack_entries

_KEY = b"k" * 20


def _config(data_dir: Path, mb: int) -> StorageConfig:
    cache = (mb + 64) << 20
    return StorageConfig(data_dir=data_dir, write_cache_bytes=cache, checkpoint_interval_s=3600)


async def fill(data_dir: Path, mb: int, batch: int, size: int, ledgers: int) -> int:
    """Journal about ``mb`` MB of entries, then stop as a crash would; the entries."""
    core = await BookieCore.open(_config(data_dir, mb))
    data = b"r" * size
    entries = 0
    next_id = dict.fromkeys(range(1, ledgers + 1), 0)
    pending = []
    while entries * (size + ENTRY_HEADER.size) < mb << 20:
        for ledger_id in next_id:
            first = next_id[ledger_id]
            blob = b"".join(
                ENTRY_HEADER.pack(e, e - 1, entry_digest(ledger_id, e, e - 1, data), size) + data
                for e in range(first, first + batch)
            )
            next_id[ledger_id] = first + batch
            batch_entries, _ = unpack_entries(blob)
            pending.append(
                core.add_batch(
                    ledger_id,
                    _KEY,
                    batch_entries,
                    recovery=False,
                    durability=Durability.PERSISTENT,
                    packed=blob,
                )
            )
            entries += batch
        if len(pending) >= 64:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    await core.abandon()
    return entries


def replay_once(data_dir: Path, mb: int, memory: bool) -> tuple[float, float, int]:
    """Wall-clock and CPU seconds of one opening, and the bytes it replayed; with
    ``memory``, what the replayed write cache costs is printed."""
    wall, cpu = time.perf_counter(), time.process_time()
    loaded = load_store(_config(data_dir, mb))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    replayed = loaded.replayed_bytes
    if memory:
        with open("/proc/self/statm") as statm:
            resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        collection = time.perf_counter()
        gc.collect()
        collection = time.perf_counter() - collection
        print(
            f"write cache of {loaded.cache.count} entries: resident memory "
            f"{resident / 2**20:.0f} MiB, a full garbage collection {collection * 1e3:.0f} ms"
        )
    loaded.storage.close()
    return wall, cpu, replayed


def main() -> None:
    """Parse arguments, fill, replay, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="MB of journal to replay")
    parser.add_argument("--batch", type=int, default=16, help="entries per add batch")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per entry")
    parser.add_argument("--ledgers", type=int, default=4, help="ledgers written")
    parser.add_argument("--repeat", type=int, default=3, help="openings to time")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the store here")
    parser.add_argument("--memory", action="store_true", help="also the write cache's memory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = args.data_dir or Path(scratch)
        if not (data_dir / "journal").exists():
            entries = asyncio.run(fill(data_dir, args.mb, args.batch, args.size, args.ledgers))
            print(f"journaled {entries} entries of {args.size} bytes in batches of {args.batch}")
        for run in range(args.repeat):
            wall, cpu, replayed = replay_once(data_dir, args.mb, args.memory and run == 0)
            print(
                f"replay of {replayed / 1e6:.0f} MB: {wall:.2f} s ({cpu:.2f} s CPU), "
                f"{replayed / 1e6 / wall:.0f} MB/s"
            )


if __name__ == "__main__":
    main()

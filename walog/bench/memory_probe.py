"""The memory of a log writer with many records in flight, measured in a process of its own.

``python -m walog.bench.memory_probe URI RECORDS`` appends ``RECORDS`` 100-byte records to a
new log without waiting for any, waits until all are acknowledged, and prints one JSON line:
the process's peak resident memory (``VmHWM``) and its resident memory before the writer
opened, in MiB. ``walog bench`` runs it in a fresh interpreter so that nothing the bench
itself allocated counts.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import walog.aio
from walog.bench.stats import payload


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


async def measure(uri: str, records: int, record_bytes: int = 100) -> dict[str, float]:
    """Peak and starting RSS (MiB) of this process around ``records`` appends in flight."""
    data = payload(record_bytes)
    async with await walog.aio.connect(uri) as client:
        log = await client.open_log(f"bench-memory-{uuid.uuid4().hex[:8]}")
        before = _status_mib("VmRSS")
        async with await log.open_writer() as writer:
            futures = [writer.append_nowait(data) for _ in range(records)]
            await asyncio.gather(*futures)
        return {"peak_rss_mib": round(_status_mib("VmHWM"), 1), "rss_before_mib": round(before, 1)}


def main(argv: list[str]) -> int:
    """Entry point: ``URI RECORDS``."""
    uri, records = argv[0], int(argv[1])
    print(json.dumps(asyncio.run(measure(uri, records))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A reader on a client host: reads a log from the start through a given position.

``python -m tests.hosts.reader URI LOG LEDGER:ENTRY:SLOT OUT`` reads with a fresh,
non-fencing reader (the log's writer may still be appending) until it has read the record
at that position, then writes one JSON line per record to ``OUT`` (``{"pos", "key",
"intact"}``, as :mod:`tests.chaos.reader`). Exit status 3 when the position is not reached
within the time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import walog.aio
from tests.chaos.records import JsonLines, decode
from tests.chaos.worker import CHAOS_CLIENT
from walog.log.position import Position

READ_LIMIT_S = 120.0


async def read_through(uri: str, name: str, end: Position) -> list[dict[str, object]]:
    """Every record from the start through ``end``."""
    rows: list[dict[str, object]] = []
    deadline = time.monotonic() + READ_LIMIT_S
    async with await walog.aio.connect(uri, config=CHAOS_CLIENT) as client:
        reader = await (await client.open_log(name)).open_reader("earliest")
        try:
            while time.monotonic() < deadline:
                for record in await reader.read_available(timeout=1.0):
                    key, intact = decode(record.data)
                    rows.append({"pos": str(record.position), "key": str(key), "intact": intact})
                    if record.position >= end:
                        return rows
        finally:
            await reader.close()
    raise TimeoutError(f"did not reach {end} within {READ_LIMIT_S:g}s ({len(rows)} records)")


def main() -> int:
    """Parse the command line, read, write the output file."""
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.reader")
    parser.add_argument("uri")
    parser.add_argument("log")
    parser.add_argument("end", type=Position.parse)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    try:
        rows = asyncio.run(read_through(args.uri, args.log, args.end))
    except TimeoutError as exc:
        print(f"reader: {exc}", file=sys.stderr)
        return 3
    out = JsonLines(args.out)
    out.write(rows)
    out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A chaos reader process: reads a whole log from the start, without fencing anyone.

``python -m tests.chaos.reader URI LOG END OUT`` reads with ``open_reader("earliest")``
until it has read the last entry ``END`` (``LEDGER:ENTRY``, or ``-`` for an empty log) and
then nothing more arrives for a moment; it writes one JSON line per record to ``OUT``:
``{"pos": POSITION, "key": KEY, "intact": BOOL}``. Exit status 3 when the end was not
reached within the time limit (the log is then incomplete for this reader).

With ``--tail`` it instead follows the log while the writers write and the nemesis strikes,
appending each record to ``OUT`` as soon as it is read, until it is killed; what it read must
be a prefix of the final log.
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
from walog.errors import WalogError, is_retriable
from walog.log.position import Position

READ_LIMIT_S = 300.0
TAIL_QUIET_S = 1.0


async def read_log(uri: str, name: str, end: Position | None) -> list[dict[str, object]]:
    """Every record up to and including entry ``end`` (and its later slots)."""
    rows: list[dict[str, object]] = []
    deadline = time.monotonic() + READ_LIMIT_S
    async with await walog.aio.connect(uri, config=CHAOS_CLIENT) as client:
        log = await client.open_log(name)
        reader = await log.open_reader("earliest")
        try:
            reached = end is None
            while time.monotonic() < deadline:
                record = await reader.read_next(timeout=TAIL_QUIET_S if reached else 5.0)
                if record is None:
                    if reached:
                        return rows
                    continue
                key, intact = decode(record.data)
                rows.append({"pos": str(record.position), "key": str(key), "intact": intact})
                if end is not None and record.position >= end:
                    reached = True
        finally:
            await reader.close()
    raise TimeoutError(f"did not reach {end} within {READ_LIMIT_S:g}s ({len(rows)} records)")


async def tail_log(uri: str, name: str, out: JsonLines) -> None:
    """Follow the log from the start while the writers write, until killed; every record
    goes to ``out`` at once. A failed read is noted and the reader goes on."""
    async with await walog.aio.connect(uri, config=CHAOS_CLIENT) as client:
        log = await client.open_log(name)
        reader = await log.open_reader("earliest")
        while True:
            try:
                records = await reader.read_available(timeout=1.0)
            except WalogError as exc:
                out.write([{"error": f"{type(exc).__name__}: {exc}"}])
                if not is_retriable(exc):
                    raise
                continue
            out.write(
                [
                    {"pos": str(r.position), "key": str(key), "intact": intact}
                    for r in records
                    for key, intact in [decode(r.data)]
                ]
            )


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, read, write the output file."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.reader")
    parser.add_argument("uri")
    parser.add_argument("log")
    parser.add_argument("end", help="LEDGER:ENTRY of the last entry, or - for an empty log")
    parser.add_argument("out", type=Path)
    parser.add_argument("--tail", action="store_true", help="follow the log until killed")
    args = parser.parse_args(argv)
    if args.tail:
        asyncio.run(tail_log(args.uri, args.log, JsonLines(args.out)))
        return 0
    end = None if args.end == "-" else Position.parse(f"{args.end}:0")
    try:
        rows = asyncio.run(read_log(args.uri, args.log, end))
    except TimeoutError as exc:
        print(f"reader: {exc}", file=sys.stderr)
        return 3
    out = JsonLines(args.out)
    out.write(rows)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

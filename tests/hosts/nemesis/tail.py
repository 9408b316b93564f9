"""A tailing reader on a client host that holds a subscription, so retention keeps what it
has not read yet.

``python -m tests.hosts.nemesis.tail URI LOG SUBSCRIPTION OUT`` follows the log from the
subscription's cursor, appends every record it returns to ``OUT`` at once (fsynced JSON
lines, as :mod:`tests.chaos.reader`: ``{"pos", "key", "intact"}``) and commits the cursor
past them at most every ``COMMIT_EVERY_S``: only what is in ``OUT`` is ever committed, so
records retention deletes are all in ``OUT``. A restarted reader skips what ``OUT`` already
holds (it read past its last commit). A failed read or commit is written as ``{"error"}``;
exit status 3 after an error that is not retriable (``DataLossError``: retention deleted a
record the subscription had not passed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import walog.aio
from tests.chaos.records import JsonLines, decode, read_json_lines
from tests.chaos.worker import CHAOS_CLIENT
from walog.errors import WalogError, is_retriable
from walog.log.position import Position

COMMIT_EVERY_S = 2.0


def last_read(out: Path) -> Position | None:
    """The position of the last record ``out`` holds."""
    last = None
    for row in read_json_lines(out):
        if "pos" in row:
            last = Position.parse(str(row["pos"]))
    return last


async def follow(uri: str, name: str, subscription: str, out_path: Path) -> int:
    """Read and commit until killed; the exit status after an error that is not retriable."""
    after = last_read(out_path)
    out = JsonLines(out_path)
    async with await walog.aio.connect(uri, config=CHAOS_CLIENT) as client:
        log = await client.open_log(name)
        reader = await log.open_reader(subscription=subscription)
        committed_at = time.monotonic()
        while True:
            try:
                records = await reader.read_available(timeout=1.0)
                fresh = [r for r in records if after is None or r.position > after]
                out.write(
                    [
                        {"pos": str(r.position), "key": str(key), "intact": intact}
                        for r in fresh
                        for key, intact in [decode(r.data)]
                    ]
                )
                if fresh:
                    after = fresh[-1].position
                if time.monotonic() - committed_at >= COMMIT_EVERY_S:
                    await reader.commit()
                    committed_at = time.monotonic()
            except WalogError as exc:
                out.write([{"error": f"{type(exc).__name__}: {exc}"}])
                if not is_retriable(exc):
                    return 3


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and follow the log."""
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.nemesis.tail")
    parser.add_argument("uri")
    parser.add_argument("log")
    parser.add_argument("subscription")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    try:
        return asyncio.run(follow(args.uri, args.log, args.subscription, args.out))
    except WalogError as exc:  # connecting or opening: the harness starts it again
        print(f"tail: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())

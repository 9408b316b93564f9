"""``walog quickstart``: a guided tour of logs on a throwaway local cluster.

Starts three real bookie processes with an SQLite metadata store in a temporary directory,
then walks through the life of a log and prints each step: append, tail from a second
reader, take over with a second writer (the first one is fenced), roll, truncate. Everything
is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from walog.cli.options import ENV_LOG_LEVEL, AddCommand
from walog.errors import WriterFencedError

if TYPE_CHECKING:
    from walog.log.position import Record
    from walog.log.sync import Log, LogReader


def _print(text: str) -> None:
    print(text, flush=True)


def _show_segments(log: Log, say: Callable[[str], None]) -> None:
    for seg in log.segments():
        end = f"last entry {seg.last_entry_id}" if seg.state == "CLOSED" else "being written"
        say(f"      ledger {seg.ledger_id:>4}  {seg.state:<6}  {end}")


def _take(reader: LogReader, count: int) -> list[Record]:
    records: list[Record] = []
    for _ in range(count):
        record = reader.read_next(timeout=30)
        if record is None:
            raise RuntimeError(f"the reader got only {len(records)} of {count} records")
        records.append(record)
    return records


def _describe(records: list[Record]) -> str:
    return ", ".join(f"{r.data.decode()}@{r.position}" for r in records)


def run_quickstart(say: Callable[[str], None] | None = None) -> int:
    """Run the tour; return 0 on success (the process exit code).

    Args:
        say: where each line goes (default: stdout).
    """
    _say = say or _print
    from walog.testing import LocalCluster  # starts processes: import only when running

    started = time.monotonic()
    _say("1. Starting a local cluster: 3 bookie processes, SQLite metadata, temp directory")
    with LocalCluster(3, "sqlite") as cluster:
        _say(f"   metadata {cluster.metadata_uri}")
        _say(f"   bookies  {', '.join(cluster.bookie_ids)}")
        with cluster.connect() as client:
            log = client.open_log("quickstart", ensemble_size=3, write_quorum=3, ack_quorum=2)
            _say(f"2. Opened log {log.name!r} (created empty); ledgers: E=3, Qw=3, Qa=2")

            first = log.open_writer()
            positions = [first.append(f"order-{i}".encode()) for i in range(5)]
            _say("3. Writer A took over (fenced nothing: the log was empty) and appended 5")
            _say(f"   records, each acked by 2 of 3 bookies: {positions[0]} .. {positions[-1]}")

            reader = log.open_reader("earliest")
            _say(f"4. A reader (never fences) read: {_describe(_take(reader, 5))}")
            futures = [first.append_async(f"order-{i}".encode()) for i in range(5, 8)]
            for f in futures:
                f.result(timeout=30)
            _say(f"   ... and tailed 3 more as they arrived: {_describe(_take(reader, 3))}")

            _say("5. Writer B takes over: it fences and recovers the last two ledgers,")
            _say("   creates a new ledger and CAS-writes the ledger list")
            second = log.open_writer()
            try:
                first.append(b"from A after the takeover")
                _say("   !! writer A could still append: fencing failed")
                return 1
            except WriterFencedError as exc:
                _say(f"   writer A's next append failed: WriterFencedError: {exc}")
            b_pos = second.append(b"order-8 (from B)")
            _say(f"   writer B appended at {b_pos}")
            _say(f"   the reader followed the change of writer: {_describe(_take(reader, 1))}")

            second.roll()
            after_roll = second.append(b"order-9 (after a roll)")
            _say(f"6. Writer B rolled to a new ledger and appended at {after_roll}; ledgers:")
            _show_segments(log, _say)

            deleted = log.truncate(after_roll)
            _say(f"7. Truncated everything before {after_roll}: {deleted} whole ledger(s) deleted")
            _show_segments(log, _say)
            _say(f"   the reader goes on: {_describe(_take(reader, 1))}")

            reader.close()
            second.close()
            first.close()
        _say("8. Closed the writer and reader; stopping the bookies and removing the data")
    _say(f"Done in {time.monotonic() - started:.1f} s.")
    return 0


def quickstart(args: argparse.Namespace) -> int:
    """``walog quickstart``: the tour, with the library's own warnings kept quiet."""
    library = logging.getLogger("walog")
    level = library.level
    if ENV_LOG_LEVEL not in os.environ:
        # The tour narrates the takeover it causes; the library's warnings about the fenced
        # writer would only repeat it, out of place.
        library.setLevel(logging.ERROR)
    steps: list[str] = []
    try:
        status = run_quickstart(steps.append if args.json else None)
    finally:
        library.setLevel(level)
    if args.json:
        print(json.dumps({"ok": status == 0, "steps": steps}, indent=2), flush=True)
    return status


def add_commands(command: AddCommand) -> None:
    """Add ``walog quickstart`` with ``command``, which adds no connection options (the
    tour runs a cluster of its own)."""
    parser = command("quickstart", quickstart, "a guided tour on a local cluster")
    parser.add_argument(
        "--json", action="store_true", help="print the tour's steps as one JSON object at the end"
    )
    parser.epilog = "It starts (and removes) a cluster of its own."


__all__ = ["add_commands", "quickstart", "run_quickstart"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_quickstart())

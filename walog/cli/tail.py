"""``walog tail``: a log's records, as Unix ``tail`` prints a file's lines.

``-n N`` prints the last N records confirmed when the command starts and exits; ``-f``
follows the log afterwards. Without ``-n`` the command prints from ``--from`` (the
earliest record by default) and follows, as it always has; ``--max`` and
``--idle-timeout`` end it. With ``--json`` every record is one JSON object on a line of
its own, with the same keys whatever the record holds. ``--since`` starts at the first
record stamped at or after a time instead (``Log.position_at``): an age (``90s``, ``10m``,
``2h``, ``7d``) or an ISO 8601 time with its zone (``2026-11-27T12:00:00Z``).
"""

from __future__ import annotations

import argparse
import base64
import collections
import datetime
import json
import math
import re
import time
from typing import TYPE_CHECKING, Any

from walog.cli.options import (
    AddCommand,
    CliError,
    add_password_options,
    connect,
    emit,
    existing_log,
    password_of,
)

if TYPE_CHECKING:
    from walog.client import Client
    from walog.log.position import Position, Record
    from walog.log.sync import Log, LogReader


def record_json(record: Record) -> dict[str, Any]:
    """A record as ``tail --json`` prints it: ``position``, ``timestamp``, ``data`` (the
    record as text, null when it is not UTF-8) and ``data_base64`` (always)."""
    try:
        text: str | None = record.data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "position": str(record.position),
        "timestamp": record.timestamp,
        "data": text,
        "data_base64": base64.b64encode(record.data).decode("ascii"),
    }


_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str, now: float) -> float:
    """``--since``'s time as seconds since the epoch: an age before ``now`` (a number
    with ``s``, ``m``, ``h`` or ``d``) or an ISO 8601 time with its zone.

    Raises:
        ValueError: anything else; the message says what is accepted.
    """
    accepted = (
        "give an age such as 90s, 10m, 2h or 7d, or an ISO 8601 time with its zone "
        "such as 2026-11-27T12:00:00Z"
    )
    age = _AGE.fullmatch(text.strip())
    if age is not None:
        return now - float(age.group(1)) * _UNIT_SECONDS[age.group(2)]
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--since {text!r} is neither an age nor a time: {accepted}") from None
    if when.tzinfo is None:
        raise ValueError(f"--since {text!r} has no time zone: {accepted}")
    seconds = when.timestamp()
    if not math.isfinite(seconds):  # pragma: no cover - fromisoformat keeps it finite
        raise ValueError(f"--since {text!r}: {accepted}")
    return seconds


def _line(record: Record, as_json: bool) -> str:
    if as_json:
        return json.dumps(record_json(record))
    return f"{record.position}\t{record.data.decode('utf-8', 'backslashreplace')}"


def _entry(position: Position) -> tuple[int, int]:
    return position.ledger_id, position.entry_id


def _last_records(
    client: Client, log: Log, password: bytes, count: int, idle_timeout: float | None
) -> tuple[LogReader | None, list[Record]]:
    """A reader past the last ``count`` records confirmed now, and those records; with
    the first record after them, if the reader already holds it. (None, []) for a log
    with no confirmed record."""
    from walog.log.lag import last_entries, open_ledger_lacs

    meta = log.metadata()
    lacs = client.loop_thread.run(open_ledger_lacs(client.async_client, meta.ledgers, password))
    window = last_entries(meta.ledgers, lacs, count)
    if window is None:
        return None, []
    start, last = window
    reader = log.open_reader(start)
    kept: collections.deque[Record] = collections.deque(maxlen=count)
    after: list[Record] = []
    reached = False
    while True:
        # The last entry's records arrive together: once one is read, the rest of them are
        # already fetched, and a read that would wait means the window is complete.
        record = reader.read_next(timeout=0 if reached else idle_timeout)
        if record is None:
            break
        if _entry(record.position) > _entry(last):
            after.append(record)
            break
        kept.append(record)
        reached = _entry(record.position) == _entry(last)
    return reader, [*kept, *after]


def tail(args: argparse.Namespace) -> int:
    """``walog tail LOG [-n N] [-f]``: print a log's records (see the module doc)."""
    from walog.log.position import Position

    if args.lines is not None and args.start is not None:
        raise CliError("-n takes the last records: leave out --from", 2)
    if args.since is not None and (args.lines is not None or args.start is not None):
        raise CliError("--since gives where to start: leave out -n and --from", 2)
    since = None
    if args.since is not None:
        try:
            since = parse_since(args.since, time.time())
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
    if args.lines is not None and args.lines < 1:
        raise CliError(f"-n must be at least 1, got {args.lines}", 2)
    start: Any = args.start or "earliest"
    if start not in ("earliest", "latest"):
        try:
            start = Position.parse(start)
        except ValueError as exc:
            raise CliError(f"--from {args.start!r}: {exc}", 2) from None
    printed = 0

    def show(record: Record) -> bool:
        """Print; False once --max records are printed."""
        nonlocal printed
        emit(_line(record, args.json))
        printed += 1
        return args.max_records is None or printed < args.max_records

    with connect(args) as client:
        log = existing_log(client, args)
        if args.lines is not None:
            reader, records = _last_records(
                client, log, password_of(args), args.lines, args.idle_timeout
            )
            if len(records) > args.lines:  # the first record after the window
                records, following = records[: args.lines], records[args.lines :]
            else:
                following = []
            for record in records:
                if not show(record):
                    return 0
            if not args.follow:
                return 0
            for later in following:
                if not show(later):
                    return 0
            if reader is None:
                reader = log.open_reader("earliest")
        elif since is not None:
            reader = log.open_reader(at=since)
        else:
            reader = log.open_reader(start)
        with reader:
            while True:
                found = reader.read_next(timeout=args.idle_timeout)
                if found is None or not show(found):
                    return 0


def add_commands(command: AddCommand) -> None:
    """Add ``walog tail``."""
    parser = command("tail", tail, "print a log's records: the last N (-n), following (-f)")
    parser.add_argument("log", help="log name")
    parser.add_argument(
        "-n",
        "--lines",
        type=int,
        metavar="N",
        help="print the last N records and exit (with -f: then follow)",
    )
    parser.add_argument(
        "-f", "--follow", action="store_true", help="with -n: keep printing new records"
    )
    parser.add_argument(
        "--from",
        dest="start",
        metavar="START",
        help="without -n: earliest, latest or LEDGER:ENTRY:SLOT [earliest]",
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="without -n or --from: from the first record stamped at or after WHEN, an age "
        "(90s, 10m, 2h, 7d) or an ISO 8601 time with its zone (2026-11-27T12:00:00Z)",
    )
    parser.add_argument("--max", dest="max_records", type=int, metavar="N", help="stop after N")
    parser.add_argument(
        "--idle-timeout", type=float, metavar="S", help="stop after S seconds without a record"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per record: position, timestamp, data (null unless UTF-8), "
        "data_base64",
    )
    add_password_options(parser)
    parser.epilog = (
        "Without -n: every record from --from on, following the log (until Ctrl-C, --max "
        "or --idle-timeout); -f changes nothing then. Never fences the writer."
    )


__all__ = ["add_commands", "parse_since", "record_json", "tail"]

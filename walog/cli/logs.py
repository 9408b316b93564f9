"""The log commands: ``walog append``, ``tail``, ``logs``, ``log show`` and ``truncate``."""

from __future__ import annotations

import argparse
import base64
import collections
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from walog.cli.options import AddCommand, add_password_options, connect, emit, password_of
from walog.cli.tables import render_table
from walog.errors import NoSuchLogError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from walog.client import Client
    from walog.log.position import Position
    from walog.log.sync import Log

# At most this many appends wait for their acknowledgement at once in `walog append`.
_APPEND_WINDOW = 1024
_JSON_HELP = "print one JSON object instead of text"


def existing_log(client: Client, args: argparse.Namespace) -> Log:
    """The log ``args.log`` with the password of the options; never creates it
    (``open_log`` would).

    Raises:
        NoSuchLogError: there is no such log.
    """
    if args.log not in client.list_logs():
        raise NoSuchLogError(f"log {args.log!r} does not exist")
    return client.open_log(args.log, password=password_of(args))


def _records_from(args: argparse.Namespace, stdin: IO[bytes]) -> Iterator[bytes]:
    if args.records:
        for record in args.records:
            yield os.fsencode(record)
        return
    for line in stdin:
        yield line[:-1] if line.endswith(b"\n") else line


def _data_text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def append(args: argparse.Namespace) -> int:
    """``walog append LOG [RECORD...]``: print each record's position once it is durable."""
    stdin = sys.stdin.buffer
    with connect(args) as client:
        log = client.open_log(
            args.log,
            ensemble_size=args.ensemble_size,
            write_quorum=args.write_quorum,
            ack_quorum=args.ack_quorum,
            password=password_of(args),
        )
        with log.open_writer() as writer:
            # Pipelined: up to _APPEND_WINDOW appends in flight, positions printed in order.
            pending: collections.deque[Future[Position]] = collections.deque()
            for record in _records_from(args, stdin):
                pending.append(writer.append_async(record))
                if len(pending) >= _APPEND_WINDOW:
                    emit(str(pending.popleft().result()))
            writer.flush()
            while pending:
                emit(str(pending.popleft().result()))
    return 0


def tail(args: argparse.Namespace) -> int:
    """``walog tail LOG``: print records as they come."""
    from walog.log.position import Position

    start: Any = args.start if args.start in ("earliest", "latest") else Position.parse(args.start)
    with connect(args) as client, existing_log(client, args).open_reader(start) as reader:
        count = 0
        while args.max_records is None or count < args.max_records:
            record = reader.read_next(timeout=args.idle_timeout)
            if record is None:
                break
            count += 1
            if args.json:
                doc: dict[str, Any] = {"position": str(record.position)}
                doc["timestamp"] = record.timestamp
                try:
                    doc["data"] = record.data.decode("utf-8")
                except UnicodeDecodeError:
                    doc["data_base64"] = base64.b64encode(record.data).decode("ascii")
                emit(json.dumps(doc))
            else:
                emit(f"{record.position}\t{_data_text(record.data)}")
    return 0


def list_logs(args: argparse.Namespace) -> int:
    """``walog logs``: every log's name."""
    with connect(args) as client:
        names = client.list_logs()
    if args.json:
        emit(json.dumps({"logs": names}))
        return 0
    for name in names:
        emit(name)
    return 0


def show_log(args: argparse.Namespace) -> int:
    """``walog log show LOG``: the log's segments and snapshots."""
    with connect(args) as client:
        log = existing_log(client, args)
        segments = log.segments()
        snapshots = log.metadata().snapshots
    doc: dict[str, object] = {
        "name": args.log,
        "segments": [
            {
                "ledger_id": s.ledger_id,
                "state": s.state,
                "first_position": None if s.first_position is None else str(s.first_position),
                "last_entry_id": s.last_entry_id,
            }
            for s in segments
        ],
        # State-machine snapshots (walog.recipes), oldest first.
        "snapshots": [info.to_doc() for info in snapshots],
    }
    if args.json:
        emit(json.dumps(doc, indent=2))
        return 0
    rows = [
        [
            str(s.ledger_id),
            s.state,
            "-" if s.first_position is None else str(s.first_position),
            str(s.last_entry_id),
        ]
        for s in segments
    ]
    for line in render_table(["LEDGER", "STATE", "FIRST POSITION", "LAST ENTRY"], rows):
        emit(line)
    if snapshots:
        emit("")
        snaps = [
            [str(i.position), i.location, str(i.size_bytes), i.checksum, i.node] for i in snapshots
        ]
        for line in render_table(["SNAPSHOT AT", "STORED IN", "BYTES", "CHECKSUM", "NODE"], snaps):
            emit(line)
    return 0


def truncate(args: argparse.Namespace) -> int:
    """``walog truncate LOG --before POSITION``: delete the ledgers wholly before it."""
    from walog.log.position import Position

    before = Position.parse(args.before)
    with connect(args) as client:
        deleted = existing_log(client, args).truncate(before)
    emit(f"deleted {deleted} ledger(s) of log {args.log!r} before {before}")
    return 0


def add_commands(command: AddCommand, group: Callable[[str, str], AddCommand]) -> None:
    """Add the log commands; ``group(name, text)`` adds ``walog NAME ACTION`` commands."""
    parser = command("append", append, "append records to a log (takes over its writer)")
    parser.add_argument("log", help="log name (created if missing)")
    parser.add_argument("records", nargs="*", help="records; none: one per line of stdin")
    parser.add_argument("--ensemble-size", type=int, default=3, help="for a new log [3]")
    parser.add_argument("--write-quorum", type=int, default=3, help="for a new log [3]")
    parser.add_argument("--ack-quorum", type=int, default=2, help="for a new log [2]")
    add_password_options(parser)
    parser.epilog = "Opening the writer fences the log's current writer. Prints positions."

    parser = command("tail", tail, "print a log's records, following new ones")
    parser.add_argument("log", help="log name")
    parser.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="START",
        help="earliest, latest or LEDGER:ENTRY:SLOT [earliest]",
    )
    parser.add_argument("-n", "--max", dest="max_records", type=int, help="stop after N records")
    parser.add_argument(
        "--idle-timeout", type=float, metavar="S", help="stop after S seconds without a record"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per record")
    add_password_options(parser)

    parser = command("logs", list_logs, "list log names")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    parser = group("log", "inspect a log")("show", show_log, "print a log's segments")
    parser.add_argument("log", help="log name")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)

    parser = command("truncate", truncate, "delete a log's ledgers before a position")
    parser.add_argument("log", help="log name")
    parser.add_argument("--before", required=True, metavar="POSITION", help="LEDGER:ENTRY:SLOT")
    add_password_options(parser)


__all__ = [
    "add_commands",
    "append",
    "existing_log",
    "list_logs",
    "show_log",
    "tail",
    "truncate",
]

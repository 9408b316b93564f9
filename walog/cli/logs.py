"""The log commands: ``walog append``, ``logs``, ``log show``, ``log cursors``,
``log repair`` and ``truncate`` (``log create`` and ``log config``:
:mod:`walog.cli.log_settings`; ``tail``: :mod:`walog.cli.tail`)."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from walog.cli import log_settings, tail
from walog.cli.options import (
    AddCommand,
    CliError,
    add_password_options,
    connect,
    emit,
    existing_log,
    password_of,
)
from walog.cli.tables import render_table

if TYPE_CHECKING:
    from concurrent.futures import Future

    from walog.log.log_metadata import LogMetadata
    from walog.log.position import Position

# At most this many appends wait for their acknowledgement at once in `walog append`.
_APPEND_WINDOW = 1024
_JSON_HELP = "print one JSON object instead of text"


def _records_from(args: argparse.Namespace, stdin: IO[bytes]) -> Iterator[bytes]:
    if args.records:
        for record in args.records:
            yield os.fsencode(record)
        return
    for line in stdin:
        yield line[:-1] if line.endswith(b"\n") else line


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
        live = log.writer()
        if live is not None and not args.take_over:
            raise CliError(
                f"log {args.log!r} has a live writer ({live.describe()}); appending would "
                "fence it: pass --take-over to do so",
                2,
            )
        # One writer, so one ledger, for every record of this call.
        with log.open_writer() as writer:
            # Pipelined: up to _APPEND_WINDOW appends in flight, positions printed in order.
            pending: collections.deque[Future[Position]] = collections.deque()
            for record in _records_from(args, stdin):
                pending.append(writer.append_async(record))
                if len(pending) >= _APPEND_WINDOW:
                    _appended(args, pending.popleft().result())
            writer.flush()
            while pending:
                _appended(args, pending.popleft().result())
    return 0


def _appended(args: argparse.Namespace, position: Position) -> None:
    """One line per durable record: its position, or with ``--json`` one JSON object."""
    emit(json.dumps({"log": args.log, "position": str(position)}) if args.json else str(position))


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
    """``walog log show LOG``: the log's writer, segments and snapshots."""
    with connect(args) as client:
        log = existing_log(client, args)
        meta = log.metadata()
        segments = [info.segment() for info in meta.ledgers]
        snapshots = meta.snapshots
        config = log.config
        writer = log.writer()
    marks = _marks(meta)
    doc: dict[str, object] = {
        "name": args.log,
        # The live writer (walog.log.registration), null when none writes.
        "writer": None if writer is None else dataclasses.asdict(writer),
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
        # The settings stored with the log (walog log config), by key.
        "config": log_settings.settings_json(config),
        **marks,
        "damaged": [{"field": d.name, "stored": d.raw, "problem": d.problem} for d in meta.damaged],
    }
    if args.json:
        emit(json.dumps(doc, indent=2))
        return 0
    emit(f"writer: {'none' if writer is None else writer.describe()}")
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
    _show_marks(marks)
    for bad in meta.damaged:
        emit(f"DAMAGED: {bad.describe()}; 'walog log repair {args.log}' removes it")
    emit("")
    for line in render_table(["SETTING", "VALUE"], log_settings.setting_rows(config)):
        emit(line)
    return 0


def cursors(args: argparse.Namespace) -> int:
    """``walog log cursors LOG [--commit SUB POSITION | --delete SUB]``: list a log's
    subscriptions, or move or remove one."""
    from walog.log.position import position_argument
    from walog.log.subscriptions import validate_subscription_name

    with connect(args) as client:
        log = existing_log(client, args)
        try:
            if args.commit is not None:
                sub, text = args.commit
                position = position_argument(text, "POSITION")
                log.commit_cursor(validate_subscription_name(sub), position)
                emit(f"subscription {sub!r} of log {args.log!r} now reads from {position}")
                return 0
            if args.delete is not None:
                sub = validate_subscription_name(args.delete)
                if sub not in log.metadata().cursors:
                    raise CliError(f"log {args.log!r} has no subscription {sub!r}", 1)
                log.commit_cursor(sub, None)
                emit(f"subscription {sub!r} of log {args.log!r} deleted")
                return 0
        except (TypeError, ValueError) as exc:
            raise CliError(str(exc), 2) from None
        subscriptions = log.subscriptions()
    if args.json:
        doc = [
            {
                "name": s.name,
                "position": str(s.position),
                "entries_behind": s.entries_behind,
                "backlog_bytes": s.backlog_bytes,
            }
            for s in subscriptions
        ]
        emit(json.dumps({"log": args.log, "subscriptions": doc}, indent=2))
        return 0
    rows = [
        [s.name, str(s.position), str(s.entries_behind), str(s.backlog_bytes)]
        for s in subscriptions
    ]
    for line in render_table(["SUBSCRIPTION", "POSITION", "ENTRIES BEHIND", "BACKLOG BYTES"], rows):
        emit(line)
    return 0


def _marks(meta: LogMetadata) -> dict[str, Any]:
    """The log's marks as positions a record can hold (None: not set): where it starts,
    the first record not archived, and each cursor's next record."""
    first = meta.ledgers[0].segment().first_position if meta.ledgers else None

    def shown(position: Position | None) -> str | None:
        return None if position is None else str(meta.existing_at_or_after(position))

    return {
        "starts_at": None if first is None else str(first),
        "archived_before": shown(meta.archived_through),
        "cursors": {name: shown(p) for name, p in sorted(meta.cursors.items())},
    }


def _show_marks(marks: dict[str, Any]) -> None:
    emit("")
    emit(f"starts at        {marks['starts_at'] or '- (no ledgers)'}")
    before = marks["archived_before"]
    emit(f"archived up to   {'- (nothing)' if before is None else before + ' (not included)'}")
    for name, position in marks["cursors"].items():
        emit(f"cursor {name!r} next reads {position}")


def repair_log(args: argparse.Namespace) -> int:
    """``walog log repair LOG``: remove the fields of the log's record that do not parse."""
    with connect(args) as client:
        removed = existing_log(client, args).repair()
    if args.json:
        emit(json.dumps({"log": args.log, "removed": [d.describe() for d in removed]}))
        return 0
    if not removed:
        emit(f"log {args.log!r}: every field parses; nothing to repair")
    for bad in removed:
        emit(f"log {args.log!r}: removed {bad.describe()}")
    return 0


def truncate(args: argparse.Namespace) -> int:
    """``walog truncate LOG --before POSITION [--dry-run]``: delete the ledgers wholly
    before it; a point past the log's end is refused (status 2), by the library's check."""
    from walog.log.position import Position
    from walog.log.retention import truncation_count
    from walog.log.truncation import check_truncation_point

    try:
        before = Position.parse(args.before)
    except ValueError as exc:
        raise CliError(f"--before {args.before!r}: {exc}", 2) from None
    with connect(args) as client:
        log = existing_log(client, args)
        try:
            if args.dry_run:
                meta = client.loop_thread.run(
                    check_truncation_point(client.async_client, args.log, before, password_of(args))
                )
                count = truncation_count(meta.ledgers, before)
                doomed = [i.ledger_id for i in meta.ledgers[:count]]
            else:
                listed = log.metadata().ledger_ids
                doomed = listed[: log.truncate(before)]
        except ValueError as exc:
            raise CliError(f"--{exc}", 2) from None
    if args.json:
        doc = {"log": args.log, "before": str(before), "dry_run": args.dry_run}
        emit(json.dumps({**doc, "ledgers": doomed}))
        return 0
    ids = f" ({', '.join(map(str, doomed))})" if doomed else ""
    verb = "would delete" if args.dry_run else "deleted"
    emit(f"{verb} {len(doomed)} ledger(s){ids} of log {args.log!r} before {before}")
    return 0


def add_commands(command: AddCommand, group: Callable[[str, str], AddCommand]) -> None:
    """Add the log commands; ``group(name, text)`` adds ``walog NAME ACTION`` commands."""
    parser = command("append", append, "append records to a log, all of one call in one new ledger")
    parser.add_argument("log", help="log name (created if missing)")
    parser.add_argument("records", nargs="*", help="records; none: one per line of stdin")
    parser.add_argument("--ensemble-size", type=int, help="for a new log [3]")
    parser.add_argument("--write-quorum", type=int, help="for a new log [3]")
    parser.add_argument("--ack-quorum", type=int, help="for a new log [2]")
    parser.add_argument(
        "--take-over",
        action="store_true",
        help="fence the log's live writer if it has one (else: refuse, status 2)",
    )
    parser.add_argument(
        "--json", action="store_true", help='one JSON object per record: {"log", "position"}'
    )
    add_password_options(parser)
    parser.intermixed = True  # type: ignore[attr-defined]
    parser.epilog = (
        "Every record of one call goes to one new ledger. A log whose writer is alive is "
        "refused unless --take-over is given: opening the writer fences it. Prints positions."
    )

    tail.add_commands(command)

    parser = command("logs", list_logs, "list log names")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    log_action = group("log", "inspect and configure a log")
    parser = log_action("show", show_log, "print a log's writer, segments and settings")
    parser.add_argument("log", help="log name")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    parser = log_action(
        "repair", repair_log, "remove the fields of a log's record that do not parse"
    )
    parser.add_argument("log", help="log name")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    log_settings.add_commands(log_action)

    parser = log_action("cursors", cursors, "list, commit or delete a log's subscriptions")
    parser.add_argument("log", help="log name")
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--commit",
        nargs=2,
        metavar=("SUB", "POSITION"),
        help="set subscription SUB to read next from POSITION (LEDGER:ENTRY:SLOT)",
    )
    action.add_argument("--delete", metavar="SUB", help="remove subscription SUB")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    add_password_options(parser)

    parser = command("truncate", truncate, "delete a log's ledgers before a position")
    parser.add_argument("log", help="log name")
    parser.add_argument("--before", required=True, metavar="POSITION", help="LEDGER:ENTRY:SLOT")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the ledgers it would delete; delete none"
    )
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    add_password_options(parser)
    parser.epilog = (
        "Deletes the ledgers whose every record is before POSITION, never the one being "
        "written. A POSITION past the log's end is refused (status 2)."
    )


__all__ = [
    "add_commands",
    "append",
    "cursors",
    "existing_log",
    "list_logs",
    "repair_log",
    "show_log",
    "truncate",
]

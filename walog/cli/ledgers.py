"""The ledger commands: ``walog ledgers``, ``ledger show`` and ``recover``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from walog.cli.options import AddCommand, add_password_options, connect, emit, password_of
from walog.cli.tables import render_table

_JSON_HELP = "print one JSON object instead of text"


def list_ledgers(args: argparse.Namespace) -> int:
    """``walog ledgers``: every ledger's id."""
    with connect(args) as client:
        ledger_ids = client.list_ledgers()
    if args.json:
        emit(json.dumps({"ledgers": ledger_ids}))
        return 0
    for ledger_id in ledger_ids:
        emit(str(ledger_id))
    return 0


def show_ledger(args: argparse.Namespace) -> int:
    """``walog ledger show ID``: the ledger's metadata."""
    with connect(args) as client:
        md = client.ledger_metadata(args.ledger_id)
    durability = md.durability
    doc = {
        "ledger_id": md.ledger_id,
        "state": md.state,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "last_entry_id": md.last_entry_id,
        "durability": getattr(durability, "name", str(durability)),
        "ensembles": [[first, list(bookies)] for first, bookies in md.ensembles],
        "custom_metadata": md.custom_metadata,
    }
    if args.json:
        emit(json.dumps(doc, indent=2))
        return 0
    emit(
        f"ledger {md.ledger_id}: {md.state}, last entry {md.last_entry_id}, "
        f"E={md.ensemble_size} Qw={md.write_quorum} Qa={md.ack_quorum}, {doc['durability']}"
    )
    rows = [[str(first), ", ".join(bookies)] for first, bookies in md.ensembles]
    for line in render_table(["FIRST ENTRY", "ENSEMBLE"], rows):
        emit(line)
    for key, value in sorted((md.custom_metadata or {}).items()):
        emit(f"{key}: {value}")
    return 0


def recover(args: argparse.Namespace) -> int:
    """``walog recover ID``: fence, recover and close an open ledger; a log's ledger is
    marked CLOSED in the log's list too."""
    from walog.log.takeover import record_recovered

    password = password_of(args)
    with connect(args) as client:
        with client.open_ledger(args.ledger_id, recovery=True, password=password) as reader:
            last = reader.last_add_confirmed
        log_name = client.loop_thread.run(
            record_recovered(client.async_client, args.ledger_id, last)
        )
        if args.json:
            doc = {"ledger_id": args.ledger_id, "state": "CLOSED", "last_entry_id": last}
            emit(json.dumps({**doc, "log": log_name}))
            return 0
        in_log = "" if log_name is None else f" (in log {log_name!r})"
        emit(f"ledger {args.ledger_id}: CLOSED, last entry {last}{in_log}")
    return 0


def add_commands(command: AddCommand, group: Callable[[str, str], AddCommand]) -> None:
    """Add the ledger commands; ``group(name, text)`` adds ``walog NAME ACTION`` commands."""
    parser = command("ledgers", list_ledgers, "list ledger ids")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    parser = group("ledger", "inspect a ledger")("show", show_ledger, "print a ledger's metadata")
    parser.add_argument("ledger_id", type=int, metavar="ID", help="the ledger's id")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)

    parser = command("recover", recover, "fence, recover and close an open ledger")
    parser.add_argument("ledger_id", type=int, metavar="ID", help="the ledger's id")
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    add_password_options(parser, "ledger")


__all__ = ["add_commands", "list_ledgers", "recover", "show_ledger"]

"""``walog status``: one screen that says whether a cluster needs a human.

It reads the metadata store (bookies known by their cookies, bookies registered as
available, every ledger's and log's record) and asks each known bookie for its ``Info``
(state, disk, version). Human output is a few aligned tables and, last, the problems;
``--json`` prints the same as one JSON object. Exit status: 0 when nothing needs
attention, 1 when something does (a bookie down or read-only, ledgers under-replicated,
the metadata store unreachable), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, cast

import walog._loop
import walog.aio
from walog.cli.options import (
    CliError,
    CommandParser,
    add_connection_options,
    check_zookeeper_listens,
    connect_options,
)
from walog.cli.status_report import (
    BookieStatus,
    ClusterStatus,
    LeaderStatus,
    LogStatus,
    render,
)
from walog.config import ClientConfig, Timeouts
from walog.errors import NewerFormatError, NoSuchLogError, WalogError
from walog.ledger.ensemble import available_bookies, read_only_bookies
from walog.log.health import log_health
from walog.log.log_config import effective_config
from walog.log.log_metadata import list_logs, read_log
from walog.log.registration import live_writer
from walog.metadata.election import ELECTIONS, current_leader
from walog.metadata.layout import (
    AVAILABLE_BOOKIES,
    COOKIES,
    LEDGERS,
    READ_ONLY_BOOKIES,
    LedgerMetadata,
)
from walog.metadata.store import NodeNotFoundError
from walog.metadata.zookeeper_probe import servers_known_to_lose_writes
from walog.transport.network import NetworkBookieClient

INFO_TIMEOUT_S = 3.0
"""How long a bookie has to answer ``Info`` before it counts as down."""


async def _bookie(
    client: walog.aio.AsyncClient, bookie_id: str, registered_under: str | None
) -> BookieStatus:
    """``registered_under``: the registration's parent (available or read-only), if any."""
    registered = registered_under is not None
    record: dict[str, Any] = {}
    if registered:
        try:
            raw, _ = await client.ctx.store.get(f"{registered_under}/{bookie_id}")
            record = json.loads(raw)
        except (NodeNotFoundError, ValueError):
            record = {}
    rack = record.get("rack") if isinstance(record.get("rack"), str) else None
    try:
        bookie = cast(NetworkBookieClient, client.ctx.pool.get(bookie_id))
        info = await asyncio.wait_for(bookie.info(), INFO_TIMEOUT_S)
    except (WalogError, TimeoutError, OSError) as exc:
        why = str(exc) or type(exc).__name__
        reason = "registered but not answering" if registered else "not registered"
        return BookieStatus(bookie_id, "down", registered, rack, problem=f"{reason} ({why})")
    status = BookieStatus(
        bookie_id,
        "read-only" if info.read_only else "writable",
        registered,
        rack,
        info.version,
        info.free_disk_bytes,
        info.total_disk_bytes,
    )
    # Read-only first: a read-only bookie may be announced apart from the available ones.
    if info.read_only:
        status.problem = (
            "refuses writes (disk full, journal or checkpoint failed, or being "
            "decommissioned); see its log"
        )
    elif not registered:
        status.state = "unavailable"
        status.problem = "answers but is not registered as available (starting or draining)"
    return status


async def gather(client: walog.aio.AsyncClient, metadata_uri: str) -> ClusterStatus:
    """Read the cluster's state through ``client``."""
    store = client.ctx.store
    available = set(await available_bookies(store))
    read_only = set(await read_only_bookies(store))
    known = available | read_only | set(await store.children(COOKIES))

    def registered_under(bookie_id: str) -> str | None:
        if bookie_id in available:
            return AVAILABLE_BOOKIES
        return READ_ONLY_BOOKIES if bookie_id in read_only else None

    bookies = list(
        await asyncio.gather(*(_bookie(client, b, registered_under(b)) for b in sorted(known)))
    )
    serving = {b.bookie_id for b in bookies if b.holds_data}
    counts = {"OPEN": 0, "IN_RECOVERY": 0, "CLOSED": 0}
    under_replicated = []
    for name in sorted(await store.children(LEDGERS), key=lambda n: (len(n), n)):
        if not name.isdigit():
            continue
        try:
            raw, _ = await store.get(f"{LEDGERS}/{name}")
            metadata = LedgerMetadata.from_json(raw)
        except NodeNotFoundError:
            continue  # deleted meanwhile
        counts[metadata.state] = counts.get(metadata.state, 0) + 1
        if any(b not in serving for _, ensemble in metadata.ensembles for b in ensemble):
            under_replicated.append(metadata.ledger_id)
    logs = []
    health = []
    log_problems = []
    now = time.time()
    for name in await list_logs(store):
        try:
            meta, _ = await read_log(store, name)
        except NoSuchLogError:
            continue  # deleted meanwhile
        except ValueError as exc:
            # Its core (format, epoch, ledger list) does not parse: the other logs still show.
            logs.append(LogStatus(name, 0, None, 0, damaged=[str(exc)]))
            continue
        last = meta.ledgers[-1] if meta.ledgers else None
        open_segment = last.ledger_id if last is not None and not last.is_closed else None
        writer = await live_writer(store, name, meta)
        logs.append(
            LogStatus(
                name,
                len(meta.ledgers),
                open_segment,
                meta.epoch,
                writer=None if writer is None else dataclasses.asdict(writer),
                damaged=[d.describe() for d in meta.damaged],
            )
        )
        try:
            health.append(log_health(name, meta, effective_config(meta), now))
        except ValueError as exc:
            log_problems.append(f"log {name!r}: its stored settings do not parse: {exc}")
    elections = []
    for name in await store.children(ELECTIONS):
        try:
            leader = await current_leader(store, name)
        except NewerFormatError as exc:
            leader = None
            log_problems.append(str(exc))
        except (ValueError, KeyError):
            leader = None  # a record this version cannot read: shown as no leader
        elections.append(LeaderStatus(name, *(leader if leader is not None else (None, None))))
    return ClusterStatus(
        metadata_uri,
        bookies,
        counts,
        under_replicated,
        logs,
        elections,
        health,
        log_problems,
        await asyncio.to_thread(servers_known_to_lose_writes, metadata_uri),
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``walog status``."""
    parser = CommandParser(
        prog="walog status",
        description="Show bookies, ledgers and logs of a cluster; exit 1 when something "
        "needs attention (a bookie down or read-only, under-replicated ledgers, the "
        "metadata store unreachable).",
    )
    add_connection_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


async def _run(uri: str, options: dict[str, Any]) -> ClusterStatus:
    """``options``: what :func:`walog.cli.options.connect_options` gives (timeout, TLS,
    token, client settings)."""
    timeouts = Timeouts(read=INFO_TIMEOUT_S, metadata=options["timeout"])
    options = {**options, "config": ClientConfig(timeouts=timeouts)}
    client = await walog.aio.connect(uri, create_metadata=False, **options)
    try:
        return await gather(client, uri)
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``walog status``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.metadata:
        parser.error("--metadata URI is required (or set WALOG_METADATA)")
    try:
        check_zookeeper_listens(args.metadata)
        status = walog._loop.run(_run(args.metadata, connect_options(args)))
    except (WalogError, OSError, CliError) as exc:
        problem = f"metadata store {args.metadata} unreachable: {exc}"
        if args.json:
            doc = {
                "metadata": {"uri": args.metadata, "reachable": False, "error": str(exc)},
                "problems": [problem],
                "healthy": False,
            }
            print(json.dumps(doc, indent=2))
        else:
            print(f"NEEDS ATTENTION (1):\n  - {problem}")
        return 1
    print(json.dumps(status.as_json(), indent=2) if args.json else render(status))
    return 1 if status.problems else 0


__all__ = [
    "BookieStatus",
    "ClusterStatus",
    "LeaderStatus",
    "LogStatus",
    "gather",
    "main",
    "render",
]

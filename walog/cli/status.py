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
from walog.cli.tables import render_table
from walog.config import ClientConfig, Timeouts
from walog.errors import NewerFormatError, NoSuchLogError, WalogError
from walog.ledger.ensemble import available_bookies, read_only_bookies
from walog.log.health import LogHealth, log_health
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


@dataclasses.dataclass
class BookieStatus:
    """What ``walog status`` knows of one bookie."""

    bookie_id: str
    state: str
    """``writable``, ``read-only``, ``down`` (no answer) or ``unavailable`` (answers but is
    not registered: starting or draining)."""
    registered: bool
    rack: str | None = None
    version: str | None = None
    free_disk_bytes: int | None = None
    total_disk_bytes: int | None = None
    problem: str | None = None

    @property
    def holds_data(self) -> bool:
        """Serves the entries it stores (writable or read-only)."""
        return self.state in ("writable", "read-only")


@dataclasses.dataclass
class LogStatus:
    """One log: its segments and its writer."""

    name: str
    segments: int
    open_segment: int | None
    """Ledger id of the segment a writer appends to (None: no writer holds the log)."""
    epoch: int
    """Writer takeovers so far."""
    writer: dict[str, Any] | None = None
    """The live writer's registration (host, pid, epoch, started_at); None: none writes."""
    damaged: list[str] = dataclasses.field(default_factory=list)
    """Fields of its record that do not parse (``walog log repair`` removes them)."""


@dataclasses.dataclass
class LeaderStatus:
    """One leader election (``walog.metadata.election``), e.g. of the writers of a log."""

    name: str
    leader: str | None
    """The candidate that leads now (None: nobody)."""
    epoch: int | None


@dataclasses.dataclass
class ClusterStatus:
    """The whole screen, as data."""

    metadata_uri: str
    bookies: list[BookieStatus]
    ledgers: dict[str, int]
    """Ledger counts by state (``OPEN``, ``IN_RECOVERY``, ``CLOSED``)."""
    under_replicated: list[int]
    """Ledgers whose ensembles name a bookie that is neither writable nor read-only."""
    logs: list[LogStatus]
    elections: list[LeaderStatus] = dataclasses.field(default_factory=list)
    log_health: list[LogHealth] = dataclasses.field(default_factory=list)
    """Each log's figures: bytes, oldest record, what retention waits for, archive lag."""
    log_problems: list[str] = dataclasses.field(default_factory=list)
    """Logs whose stored settings do not parse, and leader records of a newer format
    version, one line each."""
    warnings: list[str] = dataclasses.field(default_factory=list)
    """What is risky but not broken, one line each (it does not make the status
    unhealthy): ZooKeeper servers of a release known to lose acknowledged writes."""

    @property
    def problems(self) -> list[str]:
        """What needs a human, one line each (empty: healthy)."""
        out = [f"bookie {b.bookie_id} is {b.state}: {b.problem}" for b in self.bookies if b.problem]
        out += self.log_problems
        out += [
            f"log {log.name!r}: {bad}; 'walog log repair {log.name}' removes it"
            for log in self.logs
            for bad in log.damaged
        ]
        if self.under_replicated:
            shown = ", ".join(str(i) for i in self.under_replicated[:10])
            more = " ..." if len(self.under_replicated) > 10 else ""
            out.append(
                f"{len(self.under_replicated)} ledger(s) under-replicated ({shown}{more}): "
                "bring the bookies back or run 'walog autorecovery'"
            )
        return out

    def as_json(self) -> dict[str, Any]:
        """The status as plain JSON values."""
        return {
            "metadata": {"uri": self.metadata_uri, "reachable": True},
            "bookies": [dataclasses.asdict(b) for b in self.bookies],
            "ledgers": {**self.ledgers, "under_replicated": len(self.under_replicated)},
            "under_replicated_ledgers": self.under_replicated,
            "logs": [dataclasses.asdict(log) for log in self.logs],
            "elections": [dataclasses.asdict(e) for e in self.elections],
            "log_health": [dataclasses.asdict(h) for h in self.log_health],
            "problems": self.problems,
            "warnings": self.warnings,
            "healthy": not self.problems,
        }


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


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def render(status: ClusterStatus) -> str:
    """The human screen."""
    down = sum(1 for b in status.bookies if b.state == "down")
    lines = [
        f"metadata  {status.metadata_uri} (reachable)",
        f"bookies   {len(status.bookies)} known, "
        f"{sum(1 for b in status.bookies if b.registered)} registered, {down} down",
        "",
    ]
    rows = []
    for b in status.bookies:
        disk = "-"
        if b.free_disk_bytes is not None and b.total_disk_bytes:
            share = 100 * b.free_disk_bytes / b.total_disk_bytes
            disk = f"{_bytes(b.free_disk_bytes)} free ({share:.0f} %)"
        rows.append([b.bookie_id, b.state, b.rack or "-", disk, b.version or "-"])
    lines += render_table(["BOOKIE", "STATE", "RACK", "DISK", "VERSION"], rows)
    ledgers = status.ledgers
    lines += [
        "",
        f"ledgers   {ledgers.get('OPEN', 0)} open, {ledgers.get('IN_RECOVERY', 0)} in recovery, "
        f"{ledgers.get('CLOSED', 0)} closed, {len(status.under_replicated)} under-replicated",
    ]
    if status.logs:
        lines.append("")
        log_rows = [
            [
                log.name,
                str(log.segments),
                "-" if log.open_segment is None else str(log.open_segment),
                str(log.epoch),
                "-" if log.writer is None else f"pid {log.writer['pid']} on {log.writer['host']}",
            ]
            for log in status.logs
        ]
        lines += render_table(["LOG", "SEGMENTS", "WRITING TO", "WRITER EPOCH", "WRITER"], log_rows)
    if status.log_health:
        lines.append("")
        health_rows = [
            [
                h.name,
                _bytes(h.size_bytes)
                + (f" (+{h.unmeasured_ledgers} unmeasured)" if h.unmeasured_ledgers else ""),
                _age(h.oldest_record_age_s),
                h.retention_waiting_for,
                f"{h.archive_lag_ledgers} ({_age(h.archive_lag_s)})"
                if h.archive_lag_ledgers
                else "0",
            ]
            for h in status.log_health
        ]
        headers = ["LOG", "BYTES", "OLDEST RECORD", "RETENTION WAITS FOR", "ARCHIVE LAG"]
        lines += render_table(headers, health_rows)
    if status.elections:
        lines.append("")
        rows = [
            [e.name, e.leader or "(none)", "-" if e.epoch is None else str(e.epoch)]
            for e in status.elections
        ]
        lines += render_table(["ELECTION", "LEADER", "EPOCH"], rows)
    lines.append("")
    if status.warnings:
        lines.append(f"WARNINGS ({len(status.warnings)}):")
        lines += [f"  - {w}" for w in status.warnings]
    problems = status.problems
    if problems:
        lines.append(f"NEEDS ATTENTION ({len(problems)}):")
        lines += [f"  - {p}" for p in problems]
    else:
        lines.append("healthy: nothing needs attention")
    return "\n".join(lines)


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

"""What ``walog status`` reports: the data (:class:`ClusterStatus`, which ``--json`` prints)
and the human screen (:func:`render`). :mod:`walog.cli.status` gathers it."""

from __future__ import annotations

import dataclasses
from typing import Any

from walog.cli.tables import render_table
from walog.log.health import LogHealth


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


__all__ = ["BookieStatus", "ClusterStatus", "LeaderStatus", "LogStatus", "render"]

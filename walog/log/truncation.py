"""Carrying out truncation and retention: remove head ledgers (CAS), then delete them.

Removal from the list and deletion cannot be one atomic step. The CAS that removes ledgers
from the list also writes their ids into the log's ``pending_deletion`` list; the ledgers are
deleted afterwards and their ids cleared by a second CAS. A crash between the two leaves ids
in ``pending_deletion``, which :func:`collect_orphans` deletes the next time a writer opens
or retention runs, so no removed ledger is left with nobody to delete it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence

from walog._loggers import get_logger
from walog.errors import NoSuchLedgerError
from walog.log.lag import last_entries, open_ledger_lacs
from walog.log.ledgers import LOG_TAG, LedgerClientLike, delete_ledger_if_exists
from walog.log.log_metadata import LedgerInfo, LogMetadata, read_log, update_log
from walog.log.position import Position, ledger_end, ledger_start
from walog.log.retention import RetentionPolicy, retention_decision, truncation_count
from walog.log.sink import collect_sink_orphans

log = get_logger(__name__)
MEASURE_BATCH_ENTRIES = 256


def _remove_head(meta: LogMetadata, count: int) -> LogMetadata:
    """The list without its first ``count`` ledgers, which become pending deletion."""
    gone = meta.ledgers[:count]
    end = ledger_end(gone[-1].ledger_id, gone[-1].last_entry_id)
    through = end if meta.truncated_through is None else max(meta.truncated_through, end)
    return meta.replace(
        ledgers=meta.ledgers[count:],
        pending_deletion=(*meta.pending_deletion, *(i.ledger_id for i in gone)),
        truncated_through=through,
    )


async def _delete_pending(client: LedgerClientLike, name: str, ids: list[int]) -> None:
    """Delete ledgers listed as pending deletion, then clear them from the list."""
    if not ids:
        return
    for ledger_id in ids:
        await delete_ledger_if_exists(client, ledger_id)
    done = set(ids)

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        left = tuple(i for i in meta.pending_deletion if i not in done)
        return None if left == meta.pending_deletion else meta.replace(pending_deletion=left)

    await update_log(client.ctx.store, name, mutate)
    log.info("deleted log ledgers", log=name, ledgers=ids)


async def collect_orphans(client: LedgerClientLike, name: str) -> int:
    """Delete the ledgers the log's metadata lists as pending deletion; return how many."""
    meta, _ = await read_log(client.ctx.store, name)
    ids = list(meta.pending_deletion)
    await _delete_pending(client, name, ids)
    return len(ids)


async def refresh_closed(client: LedgerClientLike, name: str) -> LogMetadata:
    """Record the end of listed ledgers (except the last) whose ledger is CLOSED but whose
    log entry still says OPEN (their writer crashed between closing and recording)."""
    meta, _ = await read_log(client.ctx.store, name)
    found: dict[int, LedgerInfo] = {}
    for info in meta.ledgers[:-1]:
        if not info.is_closed:
            ledger = await client.ledger_metadata(info.ledger_id)
            if ledger.is_closed:
                found[info.ledger_id] = info.closed(ledger.last_entry_id, None, time.time())
    if not found:
        return meta

    def mutate(fresh: LogMetadata) -> LogMetadata:
        return fresh.replace(
            ledgers=tuple(
                found[i.ledger_id] if i.ledger_id in found and not i.is_closed else i
                for i in fresh.ledgers
            )
        )

    return (await update_log(client.ctx.store, name, mutate))[0]


def orphan_candidates(ledger_ids: Iterable[int], meta: LogMetadata) -> list[int]:
    """Ledgers that a writer may have created for this log and then lost the CAS with
    (it crashed before deleting them): neither listed nor pending deletion, at or above
    the scan watermark and below the newest listed ledger (pure).

    Only ids below the newest listed ledger are safe: a takeover or roll that created
    ledger X compares the list it read with the current one, and the list has changed for
    good once a ledger newer than X was added, so X can never be added any more.
    """
    newest = meta.last_ledger_id
    if newest is None:
        return []
    known = {*meta.ledger_ids, *meta.pending_deletion}
    low = meta.orphans_scanned_below
    return [i for i in ledger_ids if low <= i < newest and i not in known]


async def scan_orphans(client: LedgerClientLike, name: str) -> int:
    """Delete this log's ledgers left behind by lost CAS writes; return how many.

    Checks only ledgers created since the last scan (a watermark in the log's metadata).
    """
    meta, _ = await read_log(client.ctx.store, name)
    deleted = 0
    for ledger_id in orphan_candidates(await client.list_ledgers(), meta):
        try:
            ledger = await client.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            continue
        if (ledger.custom_metadata or {}).get(LOG_TAG) == name:
            await delete_ledger_if_exists(client, ledger_id)
            deleted += 1
    newest = meta.last_ledger_id
    if newest is not None:

        def mutate(fresh: LogMetadata) -> LogMetadata | None:
            if fresh.orphans_scanned_below >= newest:
                return None
            return fresh.replace(orphans_scanned_below=newest)

        await update_log(client.ctx.store, name, mutate)
    if deleted:
        log.info("deleted orphan ledgers of a lost CAS", log=name, count=deleted)
    return deleted


_Decision = Callable[[LogMetadata], int]
"""How many head ledgers to remove, given the current metadata (pure, re-run per CAS)."""


_Overrun = Callable[[LogMetadata, int], LogMetadata]
"""The metadata after removing ``count`` head ledgers, given that metadata (pure)."""


async def _remove(
    client: LedgerClientLike, name: str, decide: _Decision, after: _Overrun | None = None
) -> int:
    chosen: set[int] = set()  # over every attempt: one may have applied, its answer lost

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        count = decide(meta)
        chosen.update(i.ledger_id for i in meta.ledgers[:count])
        if not count:
            return None
        removed = _remove_head(meta, count)
        return removed if after is None else after(removed, count)

    stored, _ = await update_log(client.ctx.store, name, mutate)
    removed = [i for i in stored.pending_deletion if i in chosen]
    await _delete_pending(client, name, removed)
    return len(removed)


def truncation_end(ledgers: Sequence[LedgerInfo], open_lac: int) -> Position:
    """The furthest truncation point of a log listing ``ledgers`` (pure): just after the
    last confirmed entry of its last listed ledger, that ledger's end when CLOSED, its
    last add confirmed ``open_lac`` (-1: none) when OPEN. A log with no ledger ends at
    ``0:0:0``.

    A point there removes every record confirmed so far (but the ledger being written);
    a point after it names records nobody can read yet, or that may never exist.
    """
    if not ledgers:
        return Position(0, 0, 0)
    last = ledgers[-1]
    return ledger_end(last.ledger_id, last.last_entry_id if last.is_closed else open_lac)


def past_end_error(
    name: str, before: Position, ledgers: Sequence[LedgerInfo], open_lac: int
) -> ValueError | None:
    """The error refusing truncation point ``before`` of log ``name`` (pure), None when
    it is not past :func:`truncation_end`. It names the log's last confirmed entry (a
    position that exists) and the furthest point allowed."""
    end = truncation_end(ledgers, open_lac)
    if before <= end:
        return None
    lacs = {} if not ledgers or ledgers[-1].is_closed else {ledgers[-1].ledger_id: open_lac}
    window = last_entries(ledgers, lacs, 1)
    if window is None:
        now = "the log holds no record yet"
    else:
        now = f"the log now ends at entry {window[1].ledger_id}:{window[1].entry_id}"
    return ValueError(
        f"before: {before} is past the end of log {name!r}: {now}, so {end} is the furthest "
        "truncation point (it removes every record written so far)"
    )


async def check_truncation_point(
    client: LedgerClientLike, name: str, before: Position, password: bytes = b""
) -> LogMetadata:
    """Refuse a truncation point past the end of log ``name``; return the log's record.

    The end is what readers can see now (:func:`truncation_end`): the log's record, and
    the last add confirmed of its last ledger while OPEN, as the bookies tell any reader
    (the writer may have more acknowledged that no reader sees yet). The bookies are
    asked only for a point inside that OPEN ledger. The end only moves forward, so a
    point within it stays within it while the truncation runs.

    Raises:
        ValueError: ``before`` is past the end (names the point and the log's end).
    """
    meta, _ = await read_log(client.ctx.store, name)
    ledgers = meta.ledgers
    open_lac = -1
    if ledgers and not ledgers[-1].is_closed and before > ledger_start(ledgers[-1].ledger_id):
        lacs = await open_ledger_lacs(client, ledgers[-1:], password)
        open_lac = lacs.get(ledgers[-1].ledger_id, -1)
    error = past_end_error(name, before, ledgers, open_lac)
    if error is not None:
        raise error
    return meta


async def truncate_log(
    client: LedgerClientLike, name: str, before: Position, password: bytes = b""
) -> int:
    """Remove and delete the head ledgers whose every record is before ``before``.

    Never the ledger being written (the last of the list). Returns how many were deleted.
    ``password`` opens the log's ledgers (to read the LAC of the one being written).

    Raises:
        ValueError: ``before`` is past the log's end (:func:`check_truncation_point`);
            nothing is deleted.
    """
    await check_truncation_point(client, name, before, password)
    await refresh_closed(client, name)
    return await _remove(client, name, lambda meta: truncation_count(meta.ledgers, before))


async def _measure(client: LedgerClientLike, info: LedgerInfo, password: bytes) -> int:
    """Entry bytes of a closed ledger, read from the bookies."""
    reader = await client.open_ledger(info.ledger_id, recovery=False, password=password)
    total = 0
    try:
        for first in range(0, info.last_entry_id + 1, MEASURE_BATCH_ENTRIES):
            last = min(info.last_entry_id, first + MEASURE_BATCH_ENTRIES - 1)
            total += sum(len(e.data) for e in await reader.read(first, last))
    finally:
        await reader.close()
    return total


async def enforce_retention(
    client: LedgerClientLike,
    name: str,
    policy: RetentionPolicy,
    *,
    password: bytes = b"",
    now: float | None = None,
) -> int:
    """Apply ``policy`` to log ``name``: remove and delete the head ledgers it retires.

    Never deletes a ledger a cursor or a listed snapshot has not passed, and nothing while
    one of them (or the archived-through mark) does not parse. Also deletes
    earlier pending deletions. Ledgers of unknown size are measured first when
    the policy limits bytes. Returns how many ledgers this call retired.
    """
    await collect_orphans(client, name)
    await scan_orphans(client, name)
    await collect_sink_orphans(client, name)
    meta = await refresh_closed(client, name)
    if policy.max_bytes is not None:
        sizes = {
            i.ledger_id: await _measure(client, i, password)
            for i in meta.ledgers[:-1]
            if i.is_closed and i.size_bytes is None
        }
        if sizes:

            def record_sizes(fresh: LogMetadata) -> LogMetadata:
                return fresh.replace(
                    ledgers=tuple(
                        dataclasses.replace(i, size_bytes=sizes[i.ledger_id])
                        if i.ledger_id in sizes and i.size_bytes is None
                        else i
                        for i in fresh.ledgers
                    )
                )

            await update_log(client.ctx.store, name, record_sizes)
    moment = time.time() if now is None else now
    overrun: dict[str, int] = {}  # of the attempt whose CAS stuck (each attempt resets it)
    held: list[str] = []

    def decide(m: LogMetadata) -> int:
        # A damaged cursor, snapshot or mark may protect any record: delete nothing.
        held[:] = [d.describe() for d in m.damage_holding_data]
        if held:
            return 0
        decision = retention_decision(
            m.ledgers,
            policy,
            now=moment,
            archived_through=m.archived_through,
            subscriptions=m.cursors,
            # A state-machine snapshot is a reader of the log from its position on: a
            # node restoring it replays what follows, so that stays.
            holds=[snap.position for snap in m.snapshots],
        )
        if decision.count:  # none after a lost answer to the CAS that removed them
            overrun.clear()
            overrun.update(decision.overrun)
        return decision.count

    def move_overrun(removed: LogMetadata, count: int) -> LogMetadata:
        # An overrun subscription resumes where the log now starts.
        start = removed.truncated_through
        assert start is not None  # set by the removal
        cursors = {
            sub: max(mark, start) if sub in overrun else mark
            for sub, mark in removed.cursors.items()
        }
        return removed.replace(cursors=cursors)

    deleted = await _remove(client, name, decide, move_overrun)
    if held:
        log.warning(
            "retention deletes nothing while fields of the log's record do not parse; "
            "run 'walog log repair' on the log",
            log=name,
            damaged=held,
        )
    if deleted:
        for subscription, backlog in sorted(overrun.items()):
            _report_overrun(client, name, subscription, backlog, policy)
    return deleted


def _report_overrun(
    client: LedgerClientLike, name: str, subscription: str, backlog: int, policy: RetentionPolicy
) -> None:
    """Say that retention deleted records ``subscription`` had not read (log and metric)."""
    log.warning(
        "retention deleted records a subscription had not read: its backlog was over the "
        "limit; it resumes where the log now starts",
        log=name,
        subscription=subscription,
        backlog_bytes=backlog,
        backlog_limit_bytes=policy.backlog_limit_bytes,
        backlog_limit_s=policy.backlog_limit_s,
    )
    metrics = getattr(client.ctx, "metrics", None)
    if metrics is not None:
        metrics.backlog_overruns[(name, subscription)] += 1


__all__ = [
    "check_truncation_point",
    "collect_orphans",
    "enforce_retention",
    "orphan_candidates",
    "past_end_error",
    "refresh_closed",
    "scan_orphans",
    "truncate_log",
    "truncation_end",
]

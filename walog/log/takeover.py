"""The ledger list side of a log writer: taking a log over, creating its ledgers, recovering
listed ledgers and recording their ends (docs/protocol.md, "Takeover").

:func:`take_over_once` is steps 1-5 of the takeover: read the ledger list, fence and
recover the last two ledgers (and any earlier one still OPEN), create a new ledger, append
it to the list, CAS-write the list. ``walog.log.writer.open_log_writer`` repeats it until
its CAS sticks; the writer's rolls create, recover and record ledgers with the same helpers.
"""

from __future__ import annotations

import asyncio
import math
import time

from walog import mutations
from walog._loggers import get_logger
from walog.errors import NoSuchLedgerError, NoSuchLogError, WalogError
from walog.ledger.options import LedgerOptions
from walog.log.ledgers import (
    LOG_TAG,
    LedgerClientLike,
    LedgerReaderLike,
    LedgerWriterLike,
    delete_ledger_if_exists,
)
from walog.log.log_metadata import (
    LedgerInfo,
    LogMetadata,
    cas_retrying,
    read_log,
    update_log,
)
from walog.log.records import RecordFormatError, entry_time_range
from walog.metadata.layout import log_path
from walog.metadata.store import NodeNotFoundError

log = get_logger(__name__)


async def record_closed(
    client: LedgerClientLike,
    name: str,
    ledger_id: int,
    last: int,
    size_bytes: int,
    times: tuple[float, float] | None = None,
) -> None:
    """Record in log ``name``'s list that ``ledger_id`` closed at entry ``last``, with the
    timestamps of its first and last records when known (CAS; a ledger no longer listed,
    or already recorded, is left alone). A failure is only logged: the next takeover
    records the end again."""
    now = time.time()

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        i = meta.index_of(ledger_id)
        if i is None or meta.ledgers[i].is_closed:
            return None
        info = meta.ledgers[i].closed(last, size_bytes, now)
        return meta.with_ledger(info.with_times(times if last >= 0 else None))

    try:
        await update_log(client.ctx.store, name, mutate)
    except WalogError as exc:  # the end is recovered again by the next takeover
        log.warning("could not record closed ledger", log=name, ledger=ledger_id, error=str(exc))


async def record_recovered(client: LedgerClientLike, ledger_id: int, last: int) -> str | None:
    """Mark ``ledger_id``, just recovered outside any writer (``walog recover``), CLOSED at
    entry ``last`` in the list of the log it belongs to (its tag names the log), by CAS as
    a writer's close does; return that log's name. None when it belongs to no log, or no
    list names it any more.

    Raises:
        WalogError: the metadata store failed (the next takeover records the end anyway).
    """
    name = ((await client.ledger_metadata(ledger_id)).custom_metadata or {}).get(LOG_TAG)
    if not name:
        return None
    now = time.time()
    listed = False

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        nonlocal listed
        i = meta.index_of(ledger_id)
        listed = i is not None
        if i is None or meta.ledgers[i].is_closed:
            return None
        return meta.with_ledger(meta.ledgers[i].closed(last, None, now))

    try:
        await update_log(client.ctx.store, name, mutate)
    except NoSuchLogError:
        return None
    return name if listed else None


async def create_log_ledger(
    client: LedgerClientLike, name: str, options: LedgerOptions
) -> LedgerWriterLike:
    """Create a ledger for log ``name`` with ``options``, tagged with the log's name (the
    orphan scan finds it by that tag if no list ever names it)."""
    return await client.create_ledger_with(options, custom_metadata={LOG_TAG: name})


def applied(meta: LogMetadata, epoch: int, new_id: int) -> bool:
    """True when ``meta`` already holds the change that appended ledger ``new_id`` as
    ``epoch``: the CAS was applied although its answer was lost (a connection dropped
    between request and reply), and the retry that re-reads the list finds it.

    Only the writer that created ``new_id`` appends it, and every later takeover bumps the
    epoch, so the pair identifies the change; taking it for a rival's would delete a
    ledger the stored list names.
    """
    if mutations.enabled("lost_answer_taken_for_rival"):
        return False
    return meta.epoch == epoch and meta.last_ledger_id == new_id


DISCARD_ATTEMPTS = 5
"""Read-and-rewrite rounds :func:`discard_unlisted` tries before it leaves the ledger to the
orphan scan."""
_discards: set[asyncio.Task[bool]] = set()
"""Discards still running after the failure that started them was raised (kept referenced)."""


async def discard_unlisted(client: LedgerClientLike, name: str, ledger_id: int) -> bool:
    """Delete ``ledger_id``, a ledger this process created for log ``name`` whose list change
    failed, once no list change can name it any more; return whether it was deleted.

    A failed compare-and-swap may still apply: one whose answer was lost applied already,
    one whose caller was cancelled runs on in the metadata store's thread. So the ledger is
    deleted only after a fresh read shows that the list does not name it *and* an unchanged
    write of that record succeeded at the version read: every CAS of this process expected
    an older version, so none of them can apply afterwards (the orphan scan deletes such a
    ledger by the same reasoning once a newer ledger is listed, see
    :func:`walog.log.truncation.scan_orphans`). A ledger the list does name is left alone:
    the next takeover fences it like any other.
    """
    if mutations.enabled("failed_list_change_deletes_new_ledger") or mutations.enabled(
        "lost_answer_taken_for_rival"  # the whole old takeover: a rival's, so delete it
    ):
        await delete_ledger_if_exists(client, ledger_id)
        return True
    store, path = client.ctx.store, log_path(name)
    # A few attempts: when they fail too (the store is out), the orphan scan takes over.
    async for attempt in cas_retrying(DISCARD_ATTEMPTS):
        with attempt:
            try:
                raw, version = await store.get(path)
            except NodeNotFoundError:
                break  # the log is gone: no CAS on it can apply
            meta = LogMetadata.from_json(raw)
            if ledger_id in meta.ledger_ids or ledger_id in meta.pending_deletion:
                return False
            try:
                await store.set(path, raw, version)
            except NodeNotFoundError:
                break
    await delete_ledger_if_exists(client, ledger_id)
    return True


async def discard_unlisted_after(
    client: LedgerClientLike, name: str, ledger_id: int, error: BaseException
) -> None:
    """:func:`discard_unlisted` after ``error`` ended a list change that created
    ``ledger_id``: awaited, unless the error is a cancellation (whose canceller waits for the
    task to end: the discard then finishes in the background). Its own failure is only
    logged (:func:`walog.log.truncation.scan_orphans` deletes the ledger later)."""
    task = asyncio.ensure_future(_discard_quietly(client, name, ledger_id))
    _discards.add(task)
    task.add_done_callback(_discards.discard)
    if not isinstance(error, asyncio.CancelledError):
        await asyncio.shield(task)


async def _discard_quietly(client: LedgerClientLike, name: str, ledger_id: int) -> bool:
    try:
        return await discard_unlisted(client, name, ledger_id)
    except WalogError as exc:
        log.warning(
            "new ledger of a failed list change kept", log=name, ledger=ledger_id, error=str(exc)
        )
        return False


class ListChanged(WalogError):
    """The list changed under a takeover (or a sink's commit, walog.log.sink) in a way that
    needs fencing again.

    Not retriable for the inner CAS loop (same fenced tail would be wrong); the outer loop
    starts again from the read on it.
    """


def to_fence(meta: LogMetadata) -> list[LedgerInfo]:
    """The ledgers a new writer (or a sink's commit) fences and recovers first (pure).

    The last two: the old writer may still add to the previous ledger while rolling. And any
    earlier one the list still shows OPEN: a writer that could not close it on a roll, nor
    recover it since, left it to whoever changes the list next (readers cannot pass it).
    """
    if mutations.enabled("log_fences_only_last_ledger"):
        return list(meta.ledgers[-1:])
    tail = len(meta.ledgers) - 2
    return [info for i, info in enumerate(meta.ledgers) if i >= tail or not info.is_closed]


def with_recovered(meta: LogMetadata, recovered: dict[int, LedgerInfo]) -> LogMetadata:
    """``meta`` with the ``recovered`` ledgers' infos in place of the listed ones (pure).

    A recovered ledger that turned out empty holds nothing for anyone: it leaves the list
    and is marked for deletion in the same CAS (nothing is left undeleted).
    """
    ledgers = [recovered.get(i.ledger_id, i) for i in meta.ledgers]
    empty = [i.ledger_id for i in ledgers if i.ledger_id in recovered and i.last_entry_id < 0]
    return meta.replace(
        ledgers=tuple(i for i in ledgers if i.ledger_id not in empty),
        pending_deletion=(*meta.pending_deletion, *empty),
    )


async def recover_listed(client: LedgerClientLike, info: LedgerInfo, password: bytes) -> LedgerInfo:
    """Fence and recover one ledger of the list; return its info marked CLOSED, with the
    timestamps of its first and last records (read from its first and last entries)."""
    try:
        reader = await client.open_ledger(info.ledger_id, recovery=True, password=password)
    except NoSuchLedgerError as exc:
        # A concurrent takeover dropped (empty) or truncation deleted it: the list changed.
        raise ListChanged(f"ledger {info.ledger_id} left the list") from exc
    try:
        last = reader.last_add_confirmed
        times = None
        if last >= 0 and (not info.is_closed or info.time_range is None):
            times = await _time_range_or_none(reader, last)
    finally:
        await reader.close()
    if info.is_closed:
        return info.with_times(times) if info.last_entry_id == last else info
    return info.closed(last, None, time.time()).with_times(times)


async def ledger_time_range(reader: LedgerReaderLike, last: int) -> tuple[float, float]:
    """The timestamps of the first record of entry 0 and the last of entry ``last`` of an
    open ledger ``reader`` (two reads, one when ``last`` is 0)."""
    first_entry = (await reader.read(0, 0))[0]
    last_entry = first_entry if last == 0 else (await reader.read(last, last))[0]
    return entry_time_range(first_entry.data)[0], entry_time_range(last_entry.data)[1]


async def _time_range_or_none(reader: LedgerReaderLike, last: int) -> tuple[float, float] | None:
    """:func:`ledger_time_range`, None when the entries do not hold records in a format
    this version reads (the ledger's readers fail on them anyway; its takeover goes on)."""
    try:
        return await ledger_time_range(reader, last)
    except RecordFormatError as exc:
        log.warning("ledger's time range unreadable", ledger=reader.ledger_id, error=str(exc))
        return None


def stamp_floor(meta: LogMetadata) -> tuple[float | None, LedgerInfo | None]:
    """Where a new writer's timestamps start (pure): the last record's timestamp of the
    newest non-empty CLOSED ledger of ``meta`` when its range is recorded; else that
    ledger, whose last entry must be read (``(None, None)`` when the log holds no record).
    """
    for info in reversed(meta.ledgers):
        if not info.is_closed or info.last_entry_id < 0:
            continue
        if info.last_timestamp is not None:
            return info.last_timestamp, None
        return None, info
    return None, None


async def last_timestamp(client: LedgerClientLike, meta: LogMetadata, password: bytes) -> float:
    """The timestamp of the last record in the CLOSED ledgers of ``meta`` (a log's record
    as a takeover stored it: every ledger before the new one is CLOSED), or ``-inf`` when
    they hold none. Read from the list's ranges, or from the ledger's last entry.
    """
    floor, unread = stamp_floor(meta)
    if floor is not None:
        return floor
    if unread is None:
        return -math.inf
    reader = await client.open_ledger(unread.ledger_id, recovery=False, password=password)
    try:
        last = unread.last_entry_id
        return entry_time_range((await reader.read(last, last))[0].data)[1]
    except RecordFormatError as exc:
        log.warning("last record's timestamp unreadable", ledger=unread.ledger_id, error=str(exc))
        return -math.inf
    finally:
        await reader.close()


async def take_over_once(
    client: LedgerClientLike, name: str, options: LedgerOptions
) -> tuple[LogMetadata, LedgerWriterLike]:
    """Steps 1-5 of the takeover, once; raises ListChanged when they must start over."""
    store = client.ctx.store
    meta, _ = await read_log(store, name)
    recovered: dict[int, LedgerInfo] = {}
    for info in to_fence(meta):
        recovered[info.ledger_id] = await recover_listed(client, info, options.password)
    new_writer = await create_log_ledger(client, name, options)

    def mutate(fresh: LogMetadata) -> LogMetadata | None:
        if applied(fresh, meta.epoch + 1, new_writer.ledger_id):
            return None  # this takeover's own CAS, applied although its answer was lost
        # Changes that leave the fenced tail and the epoch alone (cursors, archive marks,
        # truncation of the head) need no new fencing; anything else does.
        if fresh.epoch != meta.epoch or fresh.ledger_ids[-2:] != meta.ledger_ids[-2:]:
            raise ListChanged(f"log {name!r} changed during takeover")
        closed = with_recovered(fresh, recovered)
        return closed.replace(
            ledgers=(*closed.ledgers, LedgerInfo(new_writer.ledger_id)), epoch=fresh.epoch + 1
        )

    try:
        stored, _ = await update_log(store, name, mutate)
    except BaseException as exc:
        # The CAS may apply after all (cancelled or unanswered, it runs on in the store's
        # thread): the ledger goes only once no list can name it.
        await discard_unlisted_after(client, name, new_writer.ledger_id, exc)
        raise
    log.info(
        "log writer took over",
        log=name,
        epoch=stored.epoch,
        ledger=new_writer.ledger_id,
        fenced=list(recovered),
    )
    return stored, new_writer


__all__ = [
    "ListChanged",
    "applied",
    "create_log_ledger",
    "discard_unlisted",
    "discard_unlisted_after",
    "last_timestamp",
    "ledger_time_range",
    "record_closed",
    "record_recovered",
    "recover_listed",
    "stamp_floor",
    "take_over_once",
    "to_fence",
    "with_recovered",
]

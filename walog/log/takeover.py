"""The ledger list side of a log writer: taking a log over, creating its ledgers, recovering
listed ledgers and recording their ends (docs/protocol.md, "Takeover").

:func:`take_over_once` is steps 1-5 of the takeover: read the ledger list, fence and
recover the last two ledgers (and any earlier one still OPEN), create a new ledger, append
it to the list, CAS-write the list. ``walog.log.writer.open_log_writer`` repeats it until
its CAS sticks; the writer's rolls create, recover and record ledgers with the same helpers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from walog import mutations
from walog._loggers import get_logger
from walog.errors import NoSuchLedgerError, WalogError
from walog.log.ledgers import LOG_TAG, LedgerClientLike, LedgerWriterLike, delete_ledger_if_exists
from walog.log.log_metadata import (
    LedgerInfo,
    LogMetadata,
    cas_retrying,
    read_log,
    update_log,
)
from walog.metadata.layout import log_path
from walog.metadata.store import NodeNotFoundError
from walog.wire.durability import Durability

log = get_logger(__name__)


@dataclasses.dataclass(frozen=True)
class LedgerOptions:
    """How the ledgers of a log are created (see ``Client.create_ledger``)."""

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    durability: Durability = Durability.PERSISTENT
    password: bytes = b""

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError(
                "need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
                f"{self.ensemble_size}, {self.write_quorum}, {self.ack_quorum}"
            )


async def record_closed(
    client: LedgerClientLike, name: str, ledger_id: int, last: int, size_bytes: int
) -> None:
    """Record in log ``name``'s list that ``ledger_id`` closed at entry ``last`` (CAS; a
    ledger no longer listed, or already recorded, is left alone). A failure is only logged:
    the next takeover records the end again."""
    now = time.time()

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        i = meta.index_of(ledger_id)
        if i is None or meta.ledgers[i].is_closed:
            return None
        return meta.with_ledger(meta.ledgers[i].closed(last, size_bytes, now))

    try:
        await update_log(client.ctx.store, name, mutate)
    except WalogError as exc:  # the end is recovered again by the next takeover
        log.warning("could not record closed ledger", log=name, ledger=ledger_id, error=str(exc))


async def create_log_ledger(
    client: LedgerClientLike, name: str, options: LedgerOptions
) -> LedgerWriterLike:
    """Create a ledger for log ``name`` with ``options``, tagged with the log's name (the
    orphan scan finds it by that tag if no list ever names it)."""
    return await client.create_ledger(
        options.ensemble_size,
        options.write_quorum,
        options.ack_quorum,
        durability=options.durability,
        password=options.password,
        custom_metadata={LOG_TAG: name},
    )


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
    """Fence and recover one ledger of the list; return its info marked CLOSED."""
    try:
        reader = await client.open_ledger(info.ledger_id, recovery=True, password=password)
    except NoSuchLedgerError as exc:
        # A concurrent takeover dropped (empty) or truncation deleted it: the list changed.
        raise ListChanged(f"ledger {info.ledger_id} left the list") from exc
    await reader.close()
    if info.is_closed:
        return info
    return info.closed(reader.last_add_confirmed, None, time.time())


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
    "LedgerOptions",
    "ListChanged",
    "applied",
    "create_log_ledger",
    "discard_unlisted",
    "discard_unlisted_after",
    "record_closed",
    "recover_listed",
    "take_over_once",
    "to_fence",
    "with_recovered",
]

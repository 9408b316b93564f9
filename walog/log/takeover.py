"""The ledger list side of a log writer: taking a log over, creating its ledgers, recovering
listed ledgers and recording their ends (seed 000, "Opening a log" and "Ledgers to logs").

:func:`take_over_once` is steps 1-5 of the seed's takeover: read the ledger list, fence and
recover the last two ledgers (and any earlier one still OPEN), create a new ledger, append
it to the list, CAS-write the list. ``walog.log.writer.open_log_writer`` repeats it until
its CAS sticks; the writer's rolls create, recover and record ledgers with the same helpers.
"""

from __future__ import annotations

import dataclasses
import time

from walog import mutations
from walog._log import get_logger
from walog.errors import NoSuchLedgerError, WalogError
from walog.log.ledgers import LOG_TAG, LedgerClientLike, LedgerWriterLike, delete_ledger_if_exists
from walog.log.metadata import LedgerInfo, LogMetadata, read_log, update_log
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
    """Steps 1-5 of "Opening a log", once; raises ListChanged when they must start over."""
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
    except BaseException:
        # The lost CAS leaves this ledger unreferenced: nobody else would ever delete it.
        await delete_ledger_if_exists(client, new_writer.ledger_id)
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
    "record_closed",
    "recover_listed",
    "take_over_once",
    "to_fence",
    "with_recovered",
]

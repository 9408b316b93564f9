"""Linking ledgers written elsewhere into a log: the commit of a parallel sink (Spark).

Tasks of a sink each write their rows into ledgers of their own (tagged with the log, the
sink id, the batch id, the streaming query and the attempt's transaction id), close them
and report them. The commit links them into the log's list with one CAS, in the order
given, as a writer takeover does: it fences and recovers the last two listed ledgers (and
any earlier one still OPEN), appends the new ones after them and bumps the epoch (an
earlier writer's next roll finds the list changed).

Exactly once:

- A sink id's last linked batch id is recorded in the same CAS (``LogMetadata.sinks``),
  with the streaming query that numbered it (``LogMetadata.sink_queries``; none for a
  batch job). A batch of that query at or below it is never linked again, so a retried
  commit or a restarted stream replaying its last batches changes nothing; for a batch
  job's own numbering only the last batch can be a rerun (it links nothing).
- A batch the record cannot vouch for is refused (:class:`SinkIdReusedError`), never
  dropped: another query's batch (a fresh checkpoint numbers its batches from 0 again) and
  a batch below a job's last one. ``reset`` forgets such a record and starts the sink id
  over from the batch; a query's own record it keeps, so its retries stay deduplicated.
- A commit whose CAS was applied but whose answer was lost finds its first ledger listed
  and stops there.
- Positions order like the log only when ledger ids ascend along the list. Ledgers that
  would break this (a newer ledger was listed meanwhile, or a later partition's task
  created its ledger first) are copied into fresh ledgers before the CAS, from the first
  one out of order on; the copies carry the same tags, the originals are deleted. A
  caller that does not need its order kept sorts the ledgers by id first (no copies).
- Ledgers that were not linked (failed or speculative attempts, a driver that crashed before
  its CAS) are deleted by :func:`collect_sink_orphans`: those of a batch its sink has since
  linked (in the same query's numbering) at once, the others once older than a grace
  period. A commit refuses ledgers older than half that period, so the collector never
  deletes a ledger a commit may still link.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import weakref
from collections.abc import Iterable, Sequence

from walog._loggers import get_logger
from walog.errors import NoSuchLedgerError, WalogError
from walog.ledger.options import LedgerOptions
from walog.log.ledgers import LedgerClientLike, delete_ledger_if_exists
from walog.log.log_metadata import LedgerInfo, LogMetadata, cas_retrying, read_log, update_log
from walog.log.takeover import ListChanged, recover_listed, to_fence, with_recovered

log = get_logger(__name__)

SINK_TAG = "walog.sink"
"""Custom metadata key: the log a sink ledger was written for (not ``walog.log``, whose
orphan scan would delete a sink ledger before its commit)."""
SINK_ID_TAG = "walog.sink.id"
SINK_BATCH_TAG = "walog.sink.batch"
SINK_TXN_TAG = "walog.sink.txn"
SINK_QUERY_TAG = "walog.sink.query"
DEFAULT_ORPHAN_GRACE = 24 * 3600.0
"""Seconds after which an unlinked sink ledger of no linked batch counts as abandoned."""
COPY_BATCH_ENTRIES = 256


class SinkCommitError(WalogError):
    """A sink batch cannot be linked (its ledgers are gone or too old); nothing was linked."""


class SinkIdReusedError(SinkCommitError):
    """A sink id's last linked batch was counted by another numbering (another streaming
    query, or a job's batch ids past this one): the batch cannot be told linked or not, so
    nothing was linked."""


@dataclasses.dataclass(frozen=True, slots=True)
class SinkLedger:
    """A closed ledger a sink task wrote: its id, last entry and entry bytes."""

    ledger_id: int
    last_entry_id: int
    size_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class SinkBatch:
    """What one commit links: ledgers in log order, and what identifies the batch.

    Attributes:
        log: the log's name.
        txn: the writing attempt's id (a job or one run of a stream's batch).
        ledgers: the ledgers, in the order their records go into the log.
        sink_id: names a sink whose batches are linked at most once each (None: only this
            attempt's own commit is idempotent).
        batch_id: the batch's number for ``sink_id``; batches link in increasing order.
        query: the streaming query that numbers the batches (its id is kept in its
            checkpoint); None for a batch job, numbered by its caller.
        reset: start ``sink_id`` over from this batch when its record is another query's
            or cannot vouch for this batch (instead of refusing it).
    """

    log: str
    txn: str
    ledgers: tuple[SinkLedger, ...]
    sink_id: str | None = None
    batch_id: int = 0
    query: str | None = None
    reset: bool = False

    def tags(self) -> dict[str, str]:
        """The custom metadata of this batch's ledgers."""
        tags = {SINK_TAG: self.log, SINK_TXN_TAG: self.txn, SINK_BATCH_TAG: str(self.batch_id)}
        if self.sink_id is not None:
            tags[SINK_ID_TAG] = self.sink_id
        if self.query is not None:
            tags[SINK_QUERY_TAG] = self.query
        return tags


# -- pure decisions ----------------------------------------------------------------------


def already_linked(meta: LogMetadata, batch: SinkBatch) -> bool:
    """True when ``batch`` (or another attempt of it) is in the log already (pure).

    Raises:
        SinkIdReusedError: the sink id's record was counted by another numbering (see the
            module doc) and ``batch.reset`` is not set.
    """
    known = {*meta.ledger_ids, *meta.pending_deletion}
    if any(led.ledger_id in known for led in batch.ledgers):
        return True
    if batch.sink_id is None or batch.sink_id not in meta.sinks:
        return False
    mark = meta.sinks[batch.sink_id]
    query = meta.sink_queries.get(batch.sink_id)
    if batch.query is not None and batch.query == query:
        return batch.batch_id <= mark  # the query's own numbering
    if batch.reset:
        return False  # the record is forgotten: this batch starts the sink id over
    if query is None and batch.batch_id >= mark:
        # A job's numbering, or a query's from before queries were recorded: only the
        # last batch can be a rerun.
        return batch.batch_id == mark
    raise SinkIdReusedError(_reused(batch, mark, query))


def _reused(batch: SinkBatch, mark: int, query: str | None) -> str:
    """The refusal of ``batch``, naming the record it met and the ways out."""
    held = f"log {batch.log!r}: sink id {batch.sink_id!r} has linked batches up to {mark}"
    if query is not None:
        held += f" of streaming query {query}"
    if batch.query is not None and query is not None:
        why = (
            f"query {batch.query} numbers its batches anew (a new checkpoint starts again "
            f"at 0), so its batch {batch.batch_id} cannot be told linked or not"
        )
    elif query is not None:
        why = f"batch {batch.batch_id} of a batch job does not continue that query's numbering"
    else:
        why = (
            f"batch {batch.batch_id} is below it (a new checkpoint or a numbering started "
            "again), so it cannot be told linked or not"
        )
    return (
        f"{held}; {why}. Nothing was linked. Restart from the old checkpoint, use a new "
        "sinkId, or set resetSinkId=true to start the sink id over from this batch"
    )


def list_floor(meta: LogMetadata) -> int:
    """The id every newly linked ledger must exceed: ids ascend along the list (pure)."""
    ids = [*meta.ledger_ids, *meta.pending_deletion]
    if meta.truncated_through is not None:
        ids.append(meta.truncated_through.ledger_id)
    return max(ids, default=-1)


def out_of_order(ledgers: Sequence[SinkLedger], floor: int) -> list[int]:
    """Indexes of ``ledgers`` to copy so that ids ascend above ``floor`` in this order.

    A copy gets a newer id than every ledger existing then, so everything after the first
    copied ledger is copied too: the longest ascending prefix stays, the rest is copied
    (pure).
    """
    last = floor
    for i, led in enumerate(ledgers):
        if led.ledger_id <= last:
            return list(range(i, len(ledgers)))
        last = led.ledger_id
    return []


def link(
    meta: LogMetadata, batch: SinkBatch, recovered: dict[int, LedgerInfo], now: float
) -> LogMetadata:
    """``meta`` with the batch's ledgers appended after the recovered tail (pure).

    Recovered ledgers that are empty leave the list as pending deletions, as in a takeover.
    """
    closed = with_recovered(meta, recovered)
    added = tuple(
        LedgerInfo(
            led.ledger_id,
            state="CLOSED",
            last_entry_id=led.last_entry_id,
            ctime=now,
            closed_at=now,
            size_bytes=led.size_bytes,
        )
        for led in batch.ledgers
    )
    sinks, queries = dict(meta.sinks), dict(meta.sink_queries)
    if batch.sink_id is not None:
        sinks[batch.sink_id] = batch.batch_id
        if batch.query is None:
            queries.pop(batch.sink_id, None)
        else:
            queries[batch.sink_id] = batch.query
    return closed.replace(
        ledgers=(*closed.ledgers, *added),
        epoch=meta.epoch + 1,
        sinks=sinks,
        sink_queries=queries,
    )


def abandoned(
    tags: dict[str, str], ctime: float, meta: LogMetadata, name: str, grace: float, now: float
) -> bool:
    """True when an unlisted ledger with these tags is a sink leftover of log ``name``
    that no commit will link any more (pure; see the module doc)."""
    if tags.get(SINK_TAG) != name:
        return False
    sink_id, batch = tags.get(SINK_ID_TAG), tags.get(SINK_BATCH_TAG)
    if (
        sink_id is not None
        and batch is not None
        and tags.get(SINK_QUERY_TAG) == meta.sink_queries.get(sink_id)
        and meta.sinks.get(sink_id, -1) >= int(batch)
    ):
        return True  # the sink's own numbering has linked this batch (another attempt's)
    return now - ctime > grace


# -- the commit ----------------------------------------------------------------------------


async def copy_ledger(
    client: LedgerClientLike, led: SinkLedger, tags: dict[str, str], options: LedgerOptions
) -> SinkLedger:
    """Copy a closed ledger's entries into a new ledger (a newer id); delete the old one."""
    reader = await client.open_ledger(led.ledger_id, recovery=False, password=options.password)
    writer = await client.create_ledger_with(options, custom_metadata=tags)
    try:
        for first in range(0, led.last_entry_id + 1, COPY_BATCH_ENTRIES):
            last = min(led.last_entry_id, first + COPY_BATCH_ENTRIES - 1)
            entries = await reader.read(first, last)
            await asyncio.gather(*(writer.append_nowait(e.data) for e in entries))
        await writer.close()
    except BaseException:
        await reader.close()
        await delete_ledger_if_exists(client, writer.ledger_id)
        raise
    await reader.close()
    await delete_ledger_if_exists(client, led.ledger_id)
    return SinkLedger(writer.ledger_id, writer.last_add_confirmed, led.size_bytes)


async def _check_fresh(
    client: LedgerClientLike, batch: SinkBatch, max_age: float, now: float
) -> None:
    for led in batch.ledgers:
        try:
            ctime = (await client.ledger_metadata(led.ledger_id)).ctime
        except NoSuchLedgerError as exc:
            raise SinkCommitError(
                f"log {batch.log!r}: sink ledger {led.ledger_id} no longer exists; "
                "the batch was not linked and must be written again"
            ) from exc
        if now - ctime > max_age:
            raise SinkCommitError(
                f"log {batch.log!r}: sink ledger {led.ledger_id} was written "
                f"{now - ctime:.0f} s ago, more than the {max_age:.0f} s a commit may take "
                "(half the orphan grace period); the batch was not linked"
            )


async def _link_once(
    client: LedgerClientLike, held: list[SinkBatch], options: LedgerOptions
) -> bool:
    """One read-fence-CAS round; ``held[0]`` is the batch, updated as ledgers are copied
    (a later round must link the copies: the originals are deleted)."""
    store = client.ctx.store
    batch = held[0]
    meta, _ = await read_log(store, batch.log)
    if already_linked(meta, batch):
        return False
    for i in out_of_order(batch.ledgers, list_floor(meta)):
        copied = await copy_ledger(client, batch.ledgers[i], batch.tags(), options)
        ledgers = list(batch.ledgers)
        ledgers[i] = copied
        batch = held[0] = dataclasses.replace(batch, ledgers=tuple(ledgers))
    # A ledger the list records as CLOSED was closed by its writer before it said so.
    recovered = {
        info.ledger_id: await recover_listed(client, info, options.password)
        for info in to_fence(meta)
        if not info.is_closed
    }
    linked = False

    def mutate(fresh: LogMetadata) -> LogMetadata | None:
        nonlocal linked
        if already_linked(fresh, batch):
            return None
        if fresh.epoch != meta.epoch or fresh.ledger_ids[-2:] != meta.ledger_ids[-2:]:
            raise ListChanged(f"log {batch.log!r} changed during the sink commit")
        linked = True
        return link(fresh, batch, recovered, time.time())

    await update_log(store, batch.log, mutate)
    return linked


async def commit_sink_batch(
    client: LedgerClientLike,
    batch: SinkBatch,
    options: LedgerOptions,
    *,
    grace: float = DEFAULT_ORPHAN_GRACE,
) -> bool:
    """Link ``batch`` into its log with one CAS; True if this call linked it.

    False means it was linked already (by an earlier attempt, or this one's CAS whose answer
    was lost). Either way the batch is in the log exactly once afterwards; the caller then
    deletes this attempt's unlinked ledgers (:func:`delete_unlinked`).

    Raises:
        SinkCommitError: a ledger of the batch is gone or older than ``grace / 2``.
        SinkIdReusedError: the sink id's record cannot vouch for this batch (see the module
            doc); the caller deletes the batch's ledgers.
        walog.NoSuchLogError: the log does not exist.
    """
    await _check_fresh(client, batch, grace / 2, time.time())
    held = [batch]
    async for attempt in cas_retrying(also=ListChanged):
        with attempt:
            linked = await _link_once(client, held, options)
            if linked:
                log.info(
                    "sink batch linked",
                    log=batch.log,
                    sink=batch.sink_id,
                    batch=batch.batch_id,
                    ledgers=[led.ledger_id for led in held[0].ledgers],
                )
            return linked
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


async def delete_unlinked(client: LedgerClientLike, name: str, ledger_ids: Iterable[int]) -> int:
    """Delete those of ``ledger_ids`` the log does not list; return how many.

    Only for ledgers no commit can link any more (their batch is committed or aborted).
    """
    meta, _ = await read_log(client.ctx.store, name)
    known = {*meta.ledger_ids, *meta.pending_deletion}
    gone = [i for i in ledger_ids if i not in known]
    for ledger_id in gone:
        await delete_ledger_if_exists(client, ledger_id)
    return len(gone)


_not_sink: weakref.WeakKeyDictionary[object, set[int]] = weakref.WeakKeyDictionary()
"""Per metadata store, the ledger ids seen to be no sink ledger (tags never change): not read
again by this process. Per store: another cluster's ledger 22 says nothing of this one's."""


async def collect_sink_orphans(
    client: LedgerClientLike,
    name: str,
    *,
    grace: float = DEFAULT_ORPHAN_GRACE,
    txn: str | None = None,
    now: float | None = None,
) -> int:
    """Delete sink ledgers of log ``name`` that no commit will link; return how many.

    Those of a batch its sink has linked go at once, the others after ``grace`` seconds;
    with ``txn``, also every unlinked ledger of that (finished) transaction.
    """
    meta, _ = await read_log(client.ctx.store, name)
    known = {*meta.ledger_ids, *meta.pending_deletion}
    moment = time.time() if now is None else now
    deleted = 0
    not_sink = _not_sink.setdefault(client.ctx.store, set())
    for ledger_id in await client.list_ledgers():
        if ledger_id in known or ledger_id in not_sink:
            continue
        try:
            ledger = await client.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            continue
        tags = ledger.custom_metadata or {}
        if SINK_TAG not in tags:
            not_sink.add(ledger_id)
            continue
        mine = txn is not None and tags.get(SINK_TXN_TAG) == txn and tags.get(SINK_TAG) == name
        if mine or abandoned(tags, ledger.ctime, meta, name, grace, moment):
            await delete_ledger_if_exists(client, ledger_id)
            deleted += 1
    if deleted:
        log.info("deleted unlinked sink ledgers", log=name, count=deleted)
    return deleted


__all__ = [
    "DEFAULT_ORPHAN_GRACE",
    "SINK_BATCH_TAG",
    "SINK_ID_TAG",
    "SINK_QUERY_TAG",
    "SINK_TAG",
    "SINK_TXN_TAG",
    "SinkBatch",
    "SinkCommitError",
    "SinkIdReusedError",
    "SinkLedger",
    "abandoned",
    "already_linked",
    "collect_sink_orphans",
    "commit_sink_batch",
    "copy_ledger",
    "delete_unlinked",
    "link",
    "list_floor",
    "out_of_order",
]

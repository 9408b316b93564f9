"""Batch reads: the driver's snapshot of a log, executors' reads, the DataSourceReader.

The driver snapshots the log once (:func:`take_snapshot`): closed ledgers end at their last
entry, the open ledger at the last add confirmed asked of its bookies right then. Partitions
planned from that snapshot (``walog.spark.plan``) name fixed entry ranges, so rerunning a
job over the same bounds reads the same rows even while a writer appends.

Executors read straight from the bookies (:func:`read_range`): a :class:`ReadRange` is plain
data, and each Python worker opens its own client (kept for the worker's lifetime, as Spark
reuses workers across tasks).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import gc
import os
import threading
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from walog._loop_thread import LoopThread
from walog.client import Client, connect
from walog.config import ClientConfig, Timeouts
from walog.errors import NoSuchEntryError, NoSuchLedgerError, is_retriable
from walog.ledger.entry import Entry
from walog.ledger.reader import AsyncLedgerReader
from walog.log.archived import archive_covers, archived_entries, archived_only
from walog.log.log_metadata import read_log
from walog.log.position import Position
from walog.log.time_seek import find_position
from walog.spark.arrow import record_batches
from walog.spark.options import BookieAccess, ReadOptions
from walog.spark.plan import LedgerSpan, LogSnapshot, ReadRange, check_start, plan_ranges, resolve

READ_BATCH_ENTRIES = 256
"""Entries asked of the bookies per read call at most."""
READ_BATCH_BYTES = 4 * 1024 * 1024
"""Bytes a read call aims at, at the entry sizes seen so far."""
READ_AHEAD = 4
"""Read calls in flight per range: while the worker turns one batch of entries into Arrow
and Spark's JVM takes it in, the next ones arrive. Memory per range stays below about
``(READ_AHEAD + 1) * READ_BATCH_BYTES`` plus one Arrow batch."""
FIRST_BATCH_ENTRIES = 4
"""The first read of a range, before entry sizes are known: small, so the first Arrow
batch (and with it Spark's side of the pipeline) starts early."""

# -- driver side -------------------------------------------------------------------------


def take_snapshot(client: Client, options: ReadOptions) -> LogSnapshot:
    """The log's ledgers and how far each can be read now.

    Raises:
        walog.NoSuchLogError: the log does not exist.
    """

    async def snapshot() -> LogSnapshot:
        ctx = client.async_client
        meta, _ = await read_log(ctx.ctx.store, options.log)
        # Ledgers archived and truncated come first, read from the archive's files.
        archived = await asyncio.to_thread(archived_only, meta)
        spans: list[LedgerSpan] = [
            LedgerSpan(a.ledger_id, a.last_entry_id, closed=True, archive=meta.archive_location)
            for a in archived
        ]
        for info in meta.ledgers:
            if info.is_closed:
                spans.append(LedgerSpan(info.ledger_id, info.last_entry_id, closed=True))
                continue
            # The log lists it as OPEN; the ledger itself may be closed already (its writer
            # crashed after closing it, or a takeover recovered it).
            try:
                handle = await ctx.open_ledger(
                    info.ledger_id, recovery=False, password=options.password
                )
            except NoSuchLedgerError:
                continue  # deleted under us: truncation moved on
            try:
                lac = handle.last_add_confirmed
                if not handle.is_closed:
                    lac = max(lac, await handle.read_last_add_confirmed())
                spans.append(LedgerSpan(info.ledger_id, lac, closed=handle.is_closed))
            finally:
                await handle.close()
        gap = bool(archived) and not archive_covers(meta)
        return LogSnapshot(tuple(spans), meta.truncated_through, archive_gap=gap)

    return client.loop_thread.run(snapshot())


def starting_position(client: Client, snapshot: LogSnapshot, options: ReadOptions) -> Position:
    """Where a read with these options starts: ``startPosition`` resolved in ``snapshot``,
    or, with ``startingTimestamp``, the first record stamped at or after it
    (:meth:`walog.log.async_log.AsyncLog.position_at`; the snapshot's end when every record
    is before it)."""
    if options.starting_timestamp_ms is None:
        return resolve(snapshot, options.start)
    at = options.starting_timestamp_ms / 1000

    async def find() -> Position | None:
        ctx = client.async_client
        meta, _ = await read_log(ctx.ctx.store, options.log)
        return (await find_position(ctx, meta, at, options.password)).position

    found = client.loop_thread.run(find())
    return snapshot.latest if found is None else min(found, snapshot.latest)


def plan_batch(
    snapshot: LogSnapshot, options: ReadOptions, start: Position | None = None
) -> list[ReadRange]:
    """The partitions of a batch read with these options (from ``start`` when given:
    :func:`starting_position`)."""
    start = check_start(
        snapshot,
        resolve(snapshot, options.start) if start is None else start,
        fail_on_data_loss=options.fail_on_data_loss,
    )
    end = resolve(snapshot, options.end)
    return plan_ranges(snapshot, start, end, max_entries=options.max_entries_per_partition)


# -- executor side -----------------------------------------------------------------------

_clients: dict[tuple[str, float, BookieAccess], Client] = {}
_clients_lock = threading.Lock()


_NO_ACCESS = BookieAccess()


def worker_client(metadata: str, timeout: float, access: BookieAccess = _NO_ACCESS) -> Client:
    """This process's client for a cluster, with the TLS and token options of ``access``
    (opened once, closed when the process exits)."""
    key = (metadata, timeout, access)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            config = ClientConfig(timeouts=Timeouts(metadata=timeout))
            client = connect(metadata, timeout=timeout, config=config, **access.connect_kwargs())
            _clients[key] = client
            if len(_clients) == 1:
                atexit.register(_close_clients)
            freeze_worker_objects()
        return client


def freeze_worker_objects() -> None:
    """In a reused Spark Python worker, exempt every object alive now from garbage collection.

    Spark's Python daemon runs a full ``gc.collect()`` after each task of a reused worker.
    By then the worker holds some 60,000 long-lived objects (the modules of pyspark,
    pyarrow, gRPC and walog, this process's clients), and walking them all cost 30-50 ms
    of CPU per task, as much as reading several megabytes. ``gc.freeze()`` moves them to
    the permanent generation once; objects created afterwards (each task's) are collected
    as usual. Outside a reused worker (``SPARK_REUSE_WORKER`` unset) this does nothing.
    """
    if os.environ.get("SPARK_REUSE_WORKER"):
        gc.freeze()


def _close_clients() -> None:
    with _clients_lock:
        for client in _clients.values():
            # The process is exiting: a failing close changes nothing for anybody.
            with contextlib.suppress(Exception):
                client.close()
        _clients.clear()


def _retrying() -> Retrying:
    return Retrying(
        retry=retry_if_exception(is_retriable),
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
        stop=stop_after_attempt(8),
        reraise=True,
    )


async def _read_entries(handle: AsyncLedgerReader, first: int, last: int) -> list[Entry]:
    """Entries ``first..last``, all at or below a LAC some client saw (so they exist)."""
    try:
        return await handle.read(first, last)
    except NoSuchEntryError:
        # This client's bookies answered with a LAC older than the one the plan captured;
        # the entries are confirmed all the same, so read them without the LAC bound.
        entries = await handle.read_unconfirmed(first, last)
        if len(entries) != last - first + 1:
            raise
        return entries


def _batch_size(entries: Sequence[Entry], most: int) -> int:
    """Entries to ask for next: about READ_BATCH_BYTES at the sizes seen, within 1..most."""
    size = sum(len(e.data) for e in entries) // max(1, len(entries))
    return max(1, min(most, READ_BATCH_BYTES // max(1, size)))


def iter_entries(
    client: Client, rng: ReadRange, password: bytes, batch_entries: int = READ_BATCH_ENTRIES
) -> Iterator[Entry]:
    """The entries of a range, in order, with up to ``READ_AHEAD`` reads in flight.

    Reads are sized to about ``READ_BATCH_BYTES`` (at most ``batch_entries`` entries) at
    the entry sizes seen so far, so the entries held in memory stay bounded whatever their
    size. Reads complete in any order; entries are yielded in entry order. A range of a
    ledger only the archive holds is read from the archive's files.
    """
    if rng.archive is not None:
        yield from archived_entries(rng.archive, rng.ledger_id, rng.first_entry, rng.last_entry)
        return
    loop = client.loop_thread
    handle = loop.run(
        client.async_client.open_ledger(rng.ledger_id, recovery=False, password=password)
    )
    # Reads in flight, oldest first: (first, last, future). Each covers the entries right
    # after the previous one's, so taking them in order yields the range in order.
    pending: collections.deque[tuple[int, int, concurrent.futures.Future[list[Entry]]]]
    pending = collections.deque()
    next_first = rng.first_entry

    def submit(count: int) -> None:
        nonlocal next_first
        first, last = next_first, min(rng.last_entry, next_first + count - 1)
        pending.append((first, last, loop.submit(_read_entries(handle, first, last))))
        next_first = last + 1

    try:
        if next_first <= rng.last_entry:
            submit(min(FIRST_BATCH_ENTRIES, batch_entries))
        while pending:
            first, last, future = pending.popleft()
            entries = _collect(loop, handle, first, last, future)
            count = _batch_size(entries, batch_entries)
            while next_first <= rng.last_entry and len(pending) < READ_AHEAD:
                submit(count)
            yield from entries
    finally:
        for _, _, future in pending:
            future.cancel()
        loop.run(handle.close())


def _collect(
    loop: LoopThread,
    handle: AsyncLedgerReader,
    first: int,
    last: int,
    future: concurrent.futures.Future[list[Entry]],
) -> list[Entry]:
    """Entries ``first..last`` from a read in flight, read again where it failed or fell
    short."""
    try:
        entries = future.result()
    except Exception as exc:
        if not is_retriable(exc):
            raise
        entries = []
    while len(entries) < last - first + 1:
        more = _reread(loop, handle, first + len(entries), last)
        if not more:
            raise NoSuchEntryError(
                f"ledger {handle.ledger_id}: entry {first + len(entries)} could not be read"
            )
        entries.extend(more)
    return entries


def _reread(loop: LoopThread, handle: AsyncLedgerReader, first: int, last: int) -> list[Entry]:
    """Read one batch again after a retriable failure, with backoff."""
    for attempt in _retrying():
        with attempt:
            return loop.run(_read_entries(handle, first, last))
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


def read_range(options: ReadOptions, rng: ReadRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records of one planned range, in log order (runs on executors)."""
    client = worker_client(options.metadata, options.timeout, options.access)
    yield from record_batches(iter_entries(client, rng, options.password), rng)


# -- the Spark reader --------------------------------------------------------------------


class RangePartition(InputPartition):
    """A Spark partition carrying one :class:`ReadRange`."""

    def __init__(self, rng: ReadRange) -> None:
        super().__init__(rng)
        self.range = rng


class WalogBatchReader(DataSourceReader):
    """``spark.read.format("walog")``: one partition per ledger, split by entry range."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """Plan from a fresh snapshot of the log (driver)."""
        client = worker_client(self.options.metadata, self.options.timeout, self.options.access)
        snapshot = take_snapshot(client, self.options)
        start = starting_position(client, snapshot, self.options)
        return [RangePartition(r) for r in plan_batch(snapshot, self.options, start)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one partition from the bookies (executor)."""
        if not isinstance(partition, RangePartition):
            # Spark stands in one InputPartition(None) when the plan has no partitions.
            return iter(())
        return read_range(self.options, partition.range)


__all__ = [
    "READ_AHEAD",
    "READ_BATCH_BYTES",
    "READ_BATCH_ENTRIES",
    "RangePartition",
    "WalogBatchReader",
    "freeze_worker_objects",
    "iter_entries",
    "plan_batch",
    "read_range",
    "starting_position",
    "take_snapshot",
    "worker_client",
]

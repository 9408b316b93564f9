"""The ``walog`` sink: ``df.write.format("walog")`` and ``writeStream.format("walog")``.

Each task writes its partition's rows into a ledger of its own, tagged for the log
(walog.log.sink), and reports it; the driver's commit links the tasks' ledgers into the log
in partition order with one CAS. Exactly once per batch job and per micro-batch:

- a failed task deletes its ledger before failing; a task killed outright, and a speculative
  attempt whose report Spark discards, leave a ledger no commit links, which the commit
  (same transaction) or the orphan collector (later) deletes;
- with ``sinkId`` (required for streams: Spark's micro-batch id is the batch id; optional
  ``batchId`` for jobs) the log records the last linked batch and the query that numbered
  it, so a retried commit, a stream restarted from its checkpoint after the CAS or a rerun
  job links nothing twice; a query with another checkpoint, or a job's batch below the
  last one, is refused (``resetSinkId=true`` starts the sink id over instead);
- abort deletes the failed attempt's ledgers.

Rows: one column ``data`` (binary or string) becomes one record each; any other column is
refused by name, unless ``serialize=json`` writes every row as one JSON object.
"""

from __future__ import annotations

import base64
import collections
import concurrent.futures
import dataclasses
import datetime
import decimal
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from walog.client import Client
from walog.ledger.sync import LedgerWriter
from walog.log.records import new_batch
from walog.log.sink import (
    SinkBatch,
    SinkCommitError,
    SinkLedger,
    collect_sink_orphans,
    commit_sink_batch,
    delete_unlinked,
)
from walog.log.writer import LogWriterConfig
from walog.spark.batch import worker_client
from walog.spark.options import WriteOptions

IN_FLIGHT_ENTRIES = 64
"""Entries a task has sent and not yet seen acknowledged, at most."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property Spark sets to the micro-batch id on a stream's tasks."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property Spark sets to the query's id (kept in its checkpoint) on a stream's
tasks."""


# -- executor side -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SinkMessage(WriterCommitMessage):
    """A task's report: its partition, the closed ledgers it wrote (none if empty) and its
    streaming query (None in a batch job)."""

    partition: int
    ledgers: tuple[SinkLedger, ...]
    query: str | None = None


def _json_default(value: object) -> object:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def payloads(batch: pa.RecordBatch, serialize: str | None) -> Iterable[bytes]:
    """The record payloads of an Arrow batch of the sink's input.

    Raises:
        ValueError: a null ``data`` value.
    """
    if serialize == "json":
        return (
            json.dumps(row, default=_json_default, separators=(",", ":")).encode()
            for row in batch.to_pylist()
        )
    column = batch.column(0)
    if column.null_count:
        raise ValueError("column 'data' holds a null; every record needs a payload")
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())
    out: list[bytes] = column.to_pylist()
    return out


class _TaskLedger:
    """Packs a task's records into entries of one ledger, created at the first record."""

    def __init__(self, client: Client, options: WriteOptions, tags: dict[str, str]) -> None:
        self.client = client
        self.options = options
        self.tags = tags
        self.writer: LedgerWriter | None = None
        self.max_records = LogWriterConfig().max_records_per_entry
        self.entry = new_batch(options.max_entry_bytes, self.max_records)
        self.size = 0
        self.inflight: collections.deque[concurrent.futures.Future[int]] = collections.deque()

    def start(self) -> None:
        """Create the ledger now: tasks start in partition order, so ledgers created at
        their start mostly ascend in it (fewer copies at the commit)."""
        led = self.options.ledger
        self.writer = self.client.create_ledger_with(led, custom_metadata=self.tags)

    def add(self, timestamp: float, payload: bytes) -> None:
        if len(payload) > self.entry.max_payload_bytes:
            raise ValueError(
                f"a record of {len(payload)} bytes exceeds maxEntryBytes "
                f"{self.options.max_entry_bytes} less the record format's overhead"
            )
        if not self.entry.fits(len(payload)):
            self._send()
        if self.entry.add(timestamp, payload):
            self._send()

    def _send(self) -> None:
        if not len(self.entry):
            return
        if self.writer is None:
            self.start()
        assert self.writer is not None
        data = self.entry.encode()
        self.size += len(data)
        self.inflight.append(self.writer.append_async(data))
        self.entry = new_batch(self.options.max_entry_bytes, self.max_records)
        while len(self.inflight) > IN_FLIGHT_ENTRIES:
            self.inflight.popleft().result()

    def finish(self) -> tuple[SinkLedger, ...]:
        """Send the last entry, close the ledger; the ledgers written (none if no rows)."""
        self._send()
        if self.writer is None:
            return ()
        if self.writer.last_add_confirmed < 0 and not self.inflight:
            self.discard()  # an empty partition: nothing to link
            return ()
        while self.inflight:
            self.inflight.popleft().result()
        self.writer.close()
        return (SinkLedger(self.writer.ledger_id, self.writer.last_add_confirmed, self.size),)

    def discard(self) -> None:
        """Delete what this task wrote (it failed: nothing of it may be linked)."""
        for future in self.inflight:
            future.cancel()
        if self.writer is not None:
            self.client.delete_ledger(self.writer.ledger_id)
            self.writer = None


def write_partition(
    options: WriteOptions,
    txn: str,
    batch_id: int,
    batches: Iterator[pa.RecordBatch],
    query: str | None = None,
) -> SinkMessage:
    """Write one partition's rows into a ledger of its own (runs on executors)."""
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    client = worker_client(options.metadata, options.timeout, options.access)
    tags = SinkBatch(options.log, txn, (), options.sink_id, batch_id, query).tags()
    task = _TaskLedger(client, options, tags)
    try:
        task.start()
        for batch in batches:
            now = time.time()
            for payload in payloads(batch, options.serialize):
                task.add(now, payload)
        ledgers = task.finish()
    except BaseException:
        task.discard()
        raise
    return SinkMessage(partition, ledgers, query)


# -- driver side -------------------------------------------------------------------------


def _reports(messages: Sequence[WriterCommitMessage | None]) -> list[SinkMessage]:
    return sorted((m for m in messages if isinstance(m, SinkMessage)), key=lambda m: m.partition)


def _ledgers(messages: Sequence[WriterCommitMessage | None]) -> list[SinkLedger]:
    return [led for m in _reports(messages) for led in m.ledgers]


def _query(messages: Sequence[WriterCommitMessage | None]) -> str | None:
    """The streaming query the tasks ran for (None for a batch job)."""
    queries = {m.query for m in _reports(messages)}
    if len(queries) > 1:
        raise RuntimeError(f"one batch's tasks ran for several streaming queries: {queries}")
    return queries.pop() if queries else None


def commit_batch(
    options: WriteOptions, txn: str, batch_id: int, messages: Sequence[WriterCommitMessage | None]
) -> bool:
    """Link the tasks' ledgers in partition order, then delete what was not linked.

    Returns True when this commit linked the batch (False: it was linked before).

    Raises:
        SinkCommitError: the batch cannot be linked (:class:`SinkIdReusedError`: the sink
            id's record cannot vouch for it); its ledgers are deleted, nothing was linked.
    """
    client = worker_client(options.metadata, options.timeout, options.access)
    ledgers = _ledgers(messages)
    if options.link_order == "written":
        ledgers.sort(key=lambda led: led.ledger_id)
    batch = SinkBatch(
        options.log,
        txn,
        tuple(ledgers),
        options.sink_id,
        batch_id,
        query=_query(messages),
        reset=options.reset_sink_id,
    )

    async def run() -> bool:
        ctx = client.async_client
        linked = True
        try:
            if ledgers:  # an empty batch has nothing to link (and fences no writer)
                linked = await commit_sink_batch(
                    ctx, batch, options.ledger, grace=options.orphan_grace
                )
        except SinkCommitError:
            # Nothing was linked and no later commit will link these ledgers.
            await delete_unlinked(ctx, options.log, [led.ledger_id for led in ledgers])
            raise
        await delete_unlinked(ctx, options.log, [led.ledger_id for led in ledgers])
        await collect_sink_orphans(ctx, options.log, grace=options.orphan_grace, txn=txn)
        return linked

    return client.loop_thread.run(run())


def abort_batch(
    options: WriteOptions, txn: str, messages: Sequence[WriterCommitMessage | None]
) -> None:
    """Delete the ledgers of a failed attempt (those its tasks reported, and any other of
    its transaction that is not linked)."""
    client = worker_client(options.metadata, options.timeout, options.access)

    async def run() -> None:
        ctx = client.async_client
        await delete_unlinked(ctx, options.log, [led.ledger_id for led in _ledgers(messages)])
        await collect_sink_orphans(ctx, options.log, grace=options.orphan_grace, txn=txn)

    client.loop_thread.run(run())


def _ensure_log(options: WriteOptions) -> None:
    client = worker_client(options.metadata, options.timeout, options.access)
    client.open_log(options.log)


class WalogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("walog")``: one transaction per job."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.txn = uuid.uuid4().hex
        self.batch_id = options.batch_id or 0
        _ensure_log(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkMessage:
        """Write one partition (executor)."""
        return write_partition(self.options, self.txn, self.batch_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Link every task's ledgers into the log (driver)."""
        commit_batch(self.options, self.txn, self.batch_id, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete what the job wrote (driver)."""
        abort_batch(self.options, self.txn, messages)


class WalogStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("walog")``: one transaction per micro-batch run."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.run_id = uuid.uuid4().hex
        _ensure_log(options)

    def _txn(self, batch_id: int) -> str:
        return f"{self.run_id}-{batch_id}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkMessage:
        """Write one partition of a micro-batch (executor)."""
        ctx = TaskContext.get()
        raw = None if ctx is None else ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if raw is None:
            raise RuntimeError(f"Spark did not set {BATCH_ID_PROPERTY} on a stream's task")
        batch_id = int(raw)
        query = None if ctx is None else ctx.getLocalProperty(QUERY_ID_PROPERTY)
        if query is None:
            raise RuntimeError(f"Spark did not set {QUERY_ID_PROPERTY} on a stream's task")
        return write_partition(self.options, self._txn(batch_id), batch_id, iterator, query)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Link the micro-batch (driver); a batch linked before is not linked again."""
        commit_batch(self.options, self._txn(batchId), batchId, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Delete what the failed micro-batch wrote (driver)."""
        abort_batch(self.options, self._txn(batchId), messages)


__all__ = [
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "SinkMessage",
    "WalogBatchWriter",
    "WalogStreamWriter",
    "abort_batch",
    "commit_batch",
    "payloads",
    "write_partition",
]

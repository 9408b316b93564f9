"""Streaming reads: positions as offsets, read limits, AvailableNow and durable cursors.

An offset is ``{"position": "LEDGER:ENTRY:SLOT"}``: the next position to read. Spark
checkpoints the offsets of every micro-batch before running it, and a micro-batch reads
exactly the records at ``start <= p < end``; entries at or below a LAC never change, so a
restarted query re-running a checkpointed batch reads the same rows and the next batch
starts right after them (exactly once, with an idempotent or transactional sink).

With ``consumerName`` the end offset of each committed micro-batch is also recorded as a
cursor in the log's metadata; retention never deletes a ledger a cursor has not passed, and a
new query with that name (and no checkpoint) starts at the cursor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from walog.client import Client
from walog.log.log_metadata import commit_cursor, read_log
from walog.log.position import Position
from walog.log.records import iter_records
from walog.spark.batch import (
    RangePartition,
    iter_entries,
    read_range,
    starting_position,
    take_snapshot,
    worker_client,
)
from walog.spark.options import ReadOptions
from walog.spark.plan import (
    LogSnapshot,
    advance_by_records,
    check_start,
    plan_ranges,
)

COUNT_PARTITION_ENTRIES = 1 << 30
"""Entries per range when the driver counts records for a read limit (one range a ledger)."""


def offset_of(position: Position) -> dict[str, str]:
    """The Spark offset of a position."""
    return {"position": str(position)}


def position_of(offset: dict[str, str]) -> Position:
    """The position of a Spark offset.

    Raises:
        ValueError: not an offset this source made.
    """
    try:
        return Position.parse(offset["position"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a walog offset: {offset!r}") from exc


def _with_end_confirmed(snapshot: LogSnapshot, end: Position) -> LogSnapshot:
    """The snapshot, trusting that entries before an offset already planned exist.

    An end offset was planned from a LAC some client saw; a later snapshot may ask other
    bookies and see an older LAC. The entries before ``end`` were confirmed either way.
    """
    bound = end.entry_id - 1 if end.slot == 0 else end.entry_id
    spans = tuple(
        dataclasses.replace(s, last_entry_id=max(s.last_entry_id, bound))
        if s.ledger_id == end.ledger_id and not s.closed
        else s
        for s in snapshot.spans
    )
    return dataclasses.replace(snapshot, spans=spans)


class WalogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("walog")``: micro-batches over position offsets."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._target: Position | None = None

    # Driver-side methods run in one long-lived planner process: one client for all calls.
    def _client(self) -> Client:
        return worker_client(self.options.metadata, self.options.timeout, self.options.access)

    def _snapshot(self) -> LogSnapshot:
        return take_snapshot(self._client(), self.options)

    def initialOffset(self) -> dict[str, str]:
        """A new query starts at the consumer's cursor if it has one, else at
        ``startPosition`` or ``startingTimestamp``."""
        if self.options.consumer_name is not None:
            client = self._client()
            meta, _ = client.loop_thread.run(
                read_log(client.async_client.ctx.store, self.options.log)
            )
            cursor = meta.cursors.get(self.options.consumer_name)
            if cursor is not None:
                return offset_of(cursor)
        return offset_of(starting_position(self._client(), self._snapshot(), self.options))

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerTrigger`` as a row limit, else everything available."""
        if self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target of an AvailableNow query: the log's end right now."""
        self._target = self._snapshot().latest

    def reportLatestOffset(self) -> dict[str, str]:
        """The log's end now (for the query's progress reports)."""
        return offset_of(self._snapshot().latest)

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        """The end of the next micro-batch: the log's end (or the AvailableNow target),
        brought closer when ``limit`` caps the records."""
        snapshot = self._snapshot()
        first = check_start(
            snapshot, position_of(start), fail_on_data_loss=self.options.fail_on_data_loss
        )
        end = snapshot.latest if self._target is None else min(self._target, snapshot.latest)
        if isinstance(limit, ReadMaxRows) and end > first:
            capped = self._cap(snapshot, first, end, limit.max_rows)
            end = capped if capped is not None else end
        return offset_of(max(end, first))

    def _cap(
        self, snapshot: LogSnapshot, first: Position, end: Position, rows: int
    ) -> Position | None:
        """The end admitting at most ``rows`` records from ``first`` (reads the entries)."""
        client = self._client()

        def counts() -> Iterator[tuple[int, int, int]]:
            for rng in plan_ranges(snapshot, first, end, max_entries=COUNT_PARTITION_ENTRIES):
                for entry in iter_entries(client, rng, self.options.password):
                    count = sum(1 for _ in iter_records(entry.data))
                    yield entry.ledger_id, entry.entry_id, count

        capped = advance_by_records(counts(), first, max(1, rows))
        return None if capped is None else min(capped, end)

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        """The ranges of one micro-batch: records at ``start <= p < end``."""
        last = position_of(end)
        snapshot = _with_end_confirmed(self._snapshot(), last)
        first = check_start(
            snapshot, position_of(start), fail_on_data_loss=self.options.fail_on_data_loss
        )
        if first >= last:
            return []
        ranges = plan_ranges(
            snapshot, first, last, max_entries=self.options.max_entries_per_partition
        )
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range from the bookies (executor)."""
        if not isinstance(partition, RangePartition):
            # Spark stands in one InputPartition(None) when the plan has no partitions.
            return iter(())
        return read_range(self.options, partition.range)

    def commit(self, end: dict[str, str]) -> None:
        """Spark finished every micro-batch up to ``end``: advance the durable cursor."""
        if self.options.consumer_name is None:
            return
        client = self._client()
        client.loop_thread.run(
            commit_cursor(
                client.async_client.ctx.store,
                self.options.log,
                self.options.consumer_name,
                position_of(end),
            )
        )


__all__ = ["WalogStreamReader", "offset_of", "position_of"]

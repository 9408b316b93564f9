"""The Spark schema of a log's rows and the Arrow record batches executors yield.

Spark checks a Python data source's Arrow batches against its schema exactly, so the Arrow
types here are pinned: ``int64`` (long), ``int32`` (int), ``binary`` (never
``large_binary``) and ``timestamp[us, tz=UTC]`` (Spark's TimestampType).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from walog.ledger.entry import Entry
from walog.log.position import Position
from walog.log.records import iter_records
from walog.spark.plan import ReadRange

SCHEMA_DDL = "ledger_id long, entry_id long, slot int, timestamp timestamp, data binary"
"""The data source's columns, as Spark DDL."""

ARROW_SCHEMA = pa.schema(
    [
        pa.field("ledger_id", pa.int64(), nullable=True),
        pa.field("entry_id", pa.int64(), nullable=True),
        pa.field("slot", pa.int32(), nullable=True),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=True),
        pa.field("data", pa.binary(), nullable=True),
    ]
)
"""The same columns as Arrow types; every batch a reader yields has exactly this schema."""

DEFAULT_BATCH_ROWS = 8192


class BatchBuilder:
    """Collects rows column by column and hands them out as Arrow record batches."""

    __slots__ = ("_data", "_entry", "_ledger", "_slot", "_ts", "bytes")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._ledger: list[int] = []
        self._entry: list[int] = []
        self._slot: list[int] = []
        self._ts: list[int] = []
        self._data: list[bytes] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._data)

    def add(self, ledger_id: int, entry_id: int, slot: int, timestamp: float, data: bytes) -> None:
        """Add one row; ``timestamp`` is seconds since the epoch (microsecond precision)."""
        self._ledger.append(ledger_id)
        self._entry.append(entry_id)
        self._slot.append(slot)
        self._ts.append(round(timestamp * 1_000_000))
        self._data.append(data)
        self.bytes += len(data)

    def add_entry(self, entry: Entry, keep: ReadRange | None = None) -> int:
        """Add the records of a log entry (those ``keep`` admits); return how many."""
        added = 0
        ledger_id, entry_id = entry.ledger_id, entry.entry_id
        for slot, (timestamp, data) in enumerate(iter_records(entry.data)):
            if keep is not None and not keep.keeps(Position(ledger_id, entry_id, slot)):
                continue
            self.add(ledger_id, entry_id, slot, timestamp, data)
            added += 1
        return added

    def flush(self) -> pa.RecordBatch:
        """The rows collected so far as one batch (then the builder is empty)."""
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self._ledger, pa.int64()),
                pa.array(self._entry, pa.int64()),
                pa.array(self._slot, pa.int32()),
                pa.array(self._ts, pa.timestamp("us", tz="UTC")),
                pa.array(self._data, pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )
        self._reset()
        return batch


def record_batches(
    entries: Iterable[Entry],
    keep: ReadRange | None = None,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    batch_bytes: int = 64 * 1024 * 1024,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records held by ``entries`` (in order), bounded in rows and bytes.

    ``keep`` drops the records outside a range's bounds. Raises
    :class:`walog.log.records.RecordFormatError` on an entry that is not in the log format.
    """
    builder = BatchBuilder()
    for entry in entries:
        builder.add_entry(entry, keep)
        if len(builder) >= batch_rows or builder.bytes >= batch_bytes:
            yield builder.flush()
    if len(builder):
        yield builder.flush()


__all__ = ["ARROW_SCHEMA", "DEFAULT_BATCH_ROWS", "SCHEMA_DDL", "BatchBuilder", "record_batches"]

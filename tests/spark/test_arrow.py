"""Arrow batches of log records: Spark's exact schema, bounds inside entries (no Spark)."""

from __future__ import annotations

import datetime

import pyarrow as pa

from walog.ledger.entry import Entry
from walog.log.position import Position
from walog.log.records import encode_records
from walog.spark.arrow import ARROW_SCHEMA, record_batches
from walog.spark.plan import ReadRange

T0 = 1_700_000_000.123456


def _entries() -> list[Entry]:
    return [
        Entry(5, e, encode_records([(T0 + e, f"{e}.{s}".encode()) for s in range(3)]))
        for e in range(4)
    ]


def test_batches_have_sparks_exact_arrow_schema() -> None:
    (batch,) = list(record_batches(_entries()))
    assert batch.schema == ARROW_SCHEMA
    assert batch.schema.field("data").type == pa.binary()  # never large_binary
    assert batch.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    row = batch.slice(4, 1).to_pylist()[0]
    assert (row["ledger_id"], row["entry_id"], row["slot"], row["data"]) == (5, 1, 1, b"1.1")
    expected = datetime.datetime.fromtimestamp(T0 + 1, tz=datetime.UTC)
    assert abs(row["timestamp"] - expected) < datetime.timedelta(microseconds=1)


def test_range_bounds_inside_entries_drop_the_slots_outside() -> None:
    rng = ReadRange(5, 1, 3, start=Position(5, 1, 2), end=Position(5, 3, 1), closed=True)
    rows = [r for b in record_batches(_entries(), rng) for r in b.to_pylist()]
    assert [r["data"] for r in rows] == [b"1.2", b"2.0", b"2.1", b"2.2", b"3.0"]


def test_batches_are_bounded_in_rows() -> None:
    batches = list(record_batches(_entries(), batch_rows=5))
    assert [b.num_rows for b in batches] == [6, 6]  # whole entries: flushed once past 5
    assert pa.Table.from_batches(batches).column("slot").to_pylist() == [0, 1, 2] * 4


def test_format_2_entries_give_the_rows_of_their_records() -> None:
    # Records of producer sessions (entry format 2), mixed with one without a producer: the
    # Spark source and the archive job read them through the same Arrow path.
    entries = [
        Entry(
            5,
            e,
            encode_records(
                [(T0 + e, f"{e}.{s}".encode()) for s in range(3)],
                [("svc-7", 2 * e), None, ("svc-8", e)],
            ),
        )
        for e in range(2)
    ]
    assert entries[0].data[0] == 2
    rows = [r for b in record_batches(entries) for r in b.to_pylist()]
    assert [(r["entry_id"], r["slot"], r["data"]) for r in rows] == [
        (e, s, f"{e}.{s}".encode()) for e in range(2) for s in range(3)
    ]

"""Executors' read path without Spark: read-ahead over real bookies, bounded Arrow batches."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Generator

import pyarrow as pa
import pytest

import walog
from walog.ledger.entry import Entry
from walog.log.position import Position, ledger_end
from walog.log.records import encode_records
from walog.spark import batch
from walog.spark.arrow import record_batches
from walog.spark.plan import ReadRange
from walog.testing import LocalCluster

pytestmark = pytest.mark.spark


def _striped_ledger(client: walog.Client, entries: int) -> int:
    """A closed ledger striped over 3 bookies (Qw 2) whose entry i holds ``b"i"``."""
    writer = client.create_ledger(ensemble_size=3, write_quorum=2, ack_quorum=2)
    futures: list[concurrent.futures.Future[int]] = [
        writer.append_async(str(i).encode()) for i in range(entries)
    ]
    for future in futures:
        future.result(timeout=30)
    writer.close()
    ledger_id: int = writer.ledger_id
    return ledger_id


def test_read_ahead_yields_every_entry_of_a_range_once_in_entry_order(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reads of 5 entries with up to READ_AHEAD in flight: many reads, completing in any order.
    monkeypatch.setattr(batch, "READ_BATCH_BYTES", 5)
    with walog.connect(cluster.metadata_uri) as client:
        ledger_id = _striped_ledger(client, 97)
        rng = ReadRange(
            ledger_id, 3, 95, Position(ledger_id, 3, 0), ledger_end(ledger_id, 95), closed=True
        )
        got = list(batch.iter_entries(client, rng, b""))
    assert [e.entry_id for e in got] == list(range(3, 96))
    assert [e.data for e in got] == [str(i).encode() for i in range(3, 96)]


def test_a_consumer_stopping_early_leaves_the_client_usable(cluster: LocalCluster) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        ledger_id = _striped_ledger(client, 40)
        rng = ReadRange(
            ledger_id, 0, 39, Position(ledger_id, 0, 0), ledger_end(ledger_id, 39), closed=True
        )
        entries = batch.iter_entries(client, rng, b"", batch_entries=4)
        assert isinstance(entries, Generator)
        assert next(entries).entry_id == 0
        entries.close()  # reads still in flight are cancelled, the ledger handle closed
        assert [e.entry_id for e in batch.iter_entries(client, rng, b"")] == list(range(40))


def test_arrow_batches_end_at_the_first_entry_boundary_past_the_byte_bound() -> None:
    entries = [Entry(7, e, encode_records([(1.0, bytes(100))] * 3)) for e in range(5)]
    batches = list(record_batches(entries, batch_bytes=500))
    # 300 payload bytes per entry: a batch closes once it holds 600 >= 500.
    assert [b.num_rows for b in batches] == [6, 6, 3]
    table = pa.Table.from_batches(batches)
    assert table.column("entry_id").to_pylist() == [e for e in range(5) for _ in range(3)]
    assert table.column("data").to_pylist() == [bytes(100)] * 15

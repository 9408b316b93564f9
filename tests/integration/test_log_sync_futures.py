"""The futures of the sync LogWriter against real bookies: each is settled once, with the
record's position or the writer's failure; none acknowledged is lost; no lock per record."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import walog
from walog.errors import LedgerClosedError, WriterFencedError
from walog.log.position import Position
from walog.log.sync import Log, LogWriter
from walog.testing import LocalCluster


@pytest.fixture
def sync_client(cluster: LocalCluster) -> Iterator[walog.Client]:
    with walog.connect(cluster.metadata_uri) as client:
        yield client


class Settlings:
    """Counts how often each future's done callbacks ran (they run once per settling)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[int, int] = {}

    def watch(self, index: int, future: concurrent.futures.Future[Any]) -> None:
        def settled(_: object) -> None:
            with self._lock:
                self.counts[index] = self.counts.get(index, 0) + 1

        future.add_done_callback(settled)


def _records(log: Log) -> list[tuple[Position, bytes]]:
    """Every record of the log readable now, in order."""
    out: list[tuple[Position, bytes]] = []
    with log.open_reader() as reader:
        while (record := reader.read_next(timeout=1.0)) is not None:
            out.append((record.position, record.data))
    return out


def test_a_fenced_sync_writer_fails_every_pending_append_with_writer_fenced_error(
    sync_client: walog.Client, cluster: LocalCluster, log_name: str
) -> None:
    log = sync_client.open_log(log_name)
    writer = log.open_writer()
    first = writer.append(b"before the takeover")
    with walog.connect(cluster.metadata_uri) as other:
        other.open_log(log_name).open_writer().close()  # fences the ledger being written
    settlings = Settlings()
    futures = [writer.append_async(b"after %04d" % i) for i in range(2_000)]
    for index, future in enumerate(futures):
        settlings.watch(index, future)
    for future in futures:
        assert isinstance(future.exception(timeout=60), WriterFencedError)
        with pytest.raises(WriterFencedError):
            future.result()
    assert settlings.counts == dict.fromkeys(range(len(futures)), 1)
    with pytest.raises(WriterFencedError):
        writer.append(b"later")
    writer.close()  # a fenced writer closes quietly
    assert _records(log) == [(first, b"before the takeover")]


def _append_until_fenced(
    writer: LogWriter, futures: list[concurrent.futures.Future[Position]], acked: threading.Event
) -> None:
    """Append batches of 200 records, each waited for at its last record, until one fails."""
    while True:
        start = len(futures)
        batch = [writer.append_async(b"r%06d" % (start + i)) for i in range(200)]
        futures.extend(batch)
        if batch[-1].exception(timeout=60) is not None:
            return
        acked.set()


def test_a_sync_writer_taken_over_mid_stream_loses_no_acknowledged_record(
    sync_client: walog.Client, cluster: LocalCluster, log_name: str
) -> None:
    log = sync_client.open_log(log_name)
    writer = log.open_writer()
    futures: list[concurrent.futures.Future[Position]] = []
    acked = threading.Event()
    producer = threading.Thread(target=_append_until_fenced, args=(writer, futures, acked))
    producer.start()
    assert acked.wait(60), "no record was acknowledged"
    with walog.connect(cluster.metadata_uri) as other:
        other.open_log(log_name).open_writer().close()  # takes the log over mid-stream
    producer.join(120)
    assert not producer.is_alive()
    settlings = Settlings()
    for index, future in enumerate(futures):
        settlings.watch(index, future)
    outcomes = [future.exception(timeout=60) for future in futures]
    acknowledged = [
        future.result() for future, error in zip(futures, outcomes, strict=True) if error is None
    ]
    # The acknowledged records are a prefix of the appended ones; every later one failed
    # with the takeover, and each future was settled once.
    assert outcomes[: len(acknowledged)] == [None] * len(acknowledged)
    assert all(isinstance(error, WriterFencedError) for error in outcomes[len(acknowledged) :])
    assert len(acknowledged) < len(futures)
    assert settlings.counts == dict.fromkeys(range(len(futures)), 1)
    assert [future.exception() for future in futures] == outcomes, "an outcome changed"
    # Every acknowledged record is in the log, in order, where its position says; records
    # after them may be there too (recovery keeps what reached the bookies), in order.
    records = _records(log)
    assert records[: len(acknowledged)] == [
        (position, b"r%06d" % i) for i, position in enumerate(acknowledged)
    ]
    assert [data for _, data in records] == [b"r%06d" % i for i in range(len(records))]
    writer.close()


def test_sync_appends_after_close_fail_with_ledger_closed_error(
    sync_client: walog.Client, log_name: str
) -> None:
    writer = sync_client.open_log(log_name).open_writer()
    queued = [writer.append_async(b"q%03d" % i) for i in range(300)]
    writer.close()  # what was queued before the close goes first
    positions = [future.result(timeout=0) for future in queued]
    assert positions == sorted(positions) and len(set(positions)) == 300
    late = writer.append_async(b"after the close")
    with pytest.raises(LedgerClosedError):
        late.result(timeout=60)
    assert late.done() and not late.cancelled()


def test_sync_append_async_makes_no_condition_per_record(
    sync_client: walog.Client, log_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A concurrent.futures.Future makes a threading.Condition (and takes it four times);
    # the sync appends make one only for a future a thread has to wait on.
    made = 0

    class CountedCondition(threading.Condition):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            nonlocal made
            made += 1
            super().__init__(*args, **kwargs)

    with sync_client.open_log(log_name).open_writer() as writer:
        writer.append(b"warm")
        monkeypatch.setattr(threading, "Condition", CountedCondition)
        futures = [writer.append_async(b"%05d" % i) for i in range(5_000)]
        writer.flush()
        positions = [future.result() for future in futures]
        monkeypatch.undo()
    assert positions == sorted(positions) and len(set(positions)) == 5_000
    assert made < 50, f"{made} conditions made for 5000 appends"

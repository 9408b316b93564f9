"""The sync facade (walog.connect) against real bookie processes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

import walog
from walog._loop_thread import LoopThread
from walog.client import Client
from walog.testing import LocalCluster


class CountingLoopThread(LoopThread):
    """A loop thread that counts cross-thread wake-ups."""

    def __init__(self) -> None:
        super().__init__(name="walog-counting-loop")
        self.wakeups = 0

    def call_soon(self, callback: Callable[[], object]) -> None:
        self.wakeups += 1
        super().call_soon(callback)


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[walog.Client]:
    with walog.connect(cluster.metadata_uri) as c:
        yield c


def test_connect_returns_a_client_with_the_available_bookies(
    client: walog.Client, cluster: LocalCluster
) -> None:
    assert isinstance(client, walog.Client)
    assert client.bookies() == sorted(cluster.bookie_ids)


def test_10k_append_async_are_handed_over_in_batches_and_resolve_in_order(
    cluster: LocalCluster,
) -> None:
    loop = CountingLoopThread()
    try:
        async_client = loop.run(walog.aio.connect(cluster.metadata_uri))
        client = Client(async_client, loop)
        with client, client.create_ledger(3, 3, 2) as writer:
            done_order: list[int] = []
            lock = threading.Lock()

            def record(future: object) -> None:
                with lock:
                    done_order.append(future.result())  # type: ignore[attr-defined]

            before = loop.wakeups
            futures = [writer.append_async(b"%05d" % i) for i in range(10_000)]
            handovers = loop.wakeups - before
            for future in futures:
                future.add_done_callback(record)
            assert [f.result(timeout=60) for f in futures] == list(range(10_000))
            # One wake-up per batch, not per append.
            assert handovers <= 1_000, f"{handovers} wake-ups for 10000 appends"
            assert done_order == list(range(10_000))
            assert writer.last_add_confirmed == 9_999
            ledger_id = writer.ledger_id
        metadata = walog.connect(cluster.metadata_uri)
        with metadata:
            closed = metadata.ledger_metadata(ledger_id)
            assert (closed.state, closed.last_entry_id) == ("CLOSED", 9_999)
            with metadata.open_ledger(ledger_id) as reader:
                assert [e.data for e in reader.read(9_990, 9_999)] == [
                    b"%05d" % i for i in range(9_990, 10_000)
                ]
    finally:
        loop.stop()


def test_sync_append_returns_the_entry_id(client: walog.Client) -> None:
    with client.create_ledger() as writer:
        assert writer.append(b"a") == 0
        assert writer.append(memoryview(b"b")) == 1
        assert writer.force() == 1
        assert writer.last_add_confirmed == 1


def test_append_many_keeps_order_with_single_appends_in_one_hand_over(
    cluster: LocalCluster,
) -> None:
    loop = CountingLoopThread()
    try:
        client = Client(loop.run(walog.aio.connect(cluster.metadata_uri)), loop)
        with client, client.create_ledger(3, 3, 2) as writer:
            first = writer.append_async(b"single")
            before = loop.wakeups
            batch = writer.append_many_async(b"%04d" % i for i in range(1_000))
            assert loop.wakeups - before <= 1, "one hand-over for the whole batch"
            assert first.result(timeout=30) == 0
            assert batch.result(timeout=60) == list(range(1, 1_001))
            assert writer.append_many([]) == []
            with pytest.raises(ValueError, match="max_entry_bytes"):
                writer.append_many(
                    [b"fits", b"x" * (client.async_client.ctx.config.max_entry_bytes + 1)]
                )
            assert writer.append_many([bytearray(b"a"), memoryview(b"b")]) == [1_001, 1_002]
            ledger_id = writer.ledger_id
        with walog.connect(cluster.metadata_uri) as other:
            entries = other.open_ledger(ledger_id).read(998, 1_002)
        # Nothing of the refused batch was appended.
        assert [e.data for e in entries] == [b"0997", b"0998", b"0999", b"a", b"b"]
    finally:
        loop.stop()


def test_append_many_fails_with_the_writers_failure(client: walog.Client) -> None:
    writer = client.create_ledger()
    writer.close()
    with pytest.raises(walog.LedgerClosedError):
        writer.append_many([b"a", b"b"])


def test_sync_str_append_raises_type_error_at_the_call(client: walog.Client) -> None:
    with client.create_ledger() as writer:
        with pytest.raises(TypeError):
            writer.append_async("text")
        assert writer.append(b"ok") == 0


def test_sync_appends_after_close_raise_ledger_closed_error(client: walog.Client) -> None:
    writer = client.create_ledger()
    writer.append(b"a")
    writer.close()
    with pytest.raises(walog.LedgerClosedError):
        writer.append(b"b")


def test_close_hands_over_queued_appends_first(client: walog.Client) -> None:
    writer = client.create_ledger()
    futures = [writer.append_async(b"q") for _ in range(500)]
    writer.close()
    assert [f.result(timeout=0) for f in futures] == list(range(500))
    assert client.ledger_metadata(writer.ledger_id).last_entry_id == 499


def test_sync_reader_reads_and_tails(client: walog.Client, cluster: LocalCluster) -> None:
    with client.create_ledger() as writer:
        for i in range(5):
            writer.append(b"%d" % i)
        with walog.connect(cluster.metadata_uri) as other:
            reader = other.open_ledger(writer.ledger_id, recovery=False)
            with reader:
                assert reader.wait_last_add_confirmed(3, timeout=10.0) == 4
                assert [e.entry_id for e in reader.read(0, 4)] == [0, 1, 2, 3, 4]
                assert reader.read_last_add_confirmed() == 4
                assert not reader.is_closed


def test_sync_fenced_writer_raises_ledger_fenced_error(
    client: walog.Client, cluster: LocalCluster
) -> None:
    writer = client.create_ledger()
    writer.append(b"a")
    with walog.connect(cluster.metadata_uri) as other:
        other.open_ledger(writer.ledger_id).close()
    with pytest.raises(walog.LedgerFencedError):
        writer.append(b"b")
    writer.close()


def test_appends_from_many_threads_get_distinct_ids_in_call_order(client: walog.Client) -> None:
    with client.create_ledger() as writer:
        results: dict[int, list[int]] = {}

        def worker(n: int) -> None:
            futures = [writer.append_async(b"t%d-%d" % (n, i)) for i in range(500)]
            results[n] = [f.result(timeout=60) for f in futures]

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ids = sorted(i for r in results.values() for i in r)
        assert ids == list(range(2000))
        # Each thread's appends keep their call order.
        assert all(r == sorted(r) for r in results.values())
        assert writer.last_add_confirmed == 1999

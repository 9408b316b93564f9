"""Relaxed durability end to end (seed 004) on real bookie processes: VOLATILE adds never
sync by themselves, ``force()`` does, the LAC never passes unsynced entries, what was
forced (or written PERSISTENT) survives a SIGKILL of every bookie, and a writer never
acknowledges an entry after bookies lost entries they had acknowledged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import walog
import walog._loop
import walog.aio as aio
from tests.integration.disks import page_cache_lost_on_kill
from walog.config import ClientConfig, Timeouts
from walog.errors import (
    BookieReadOnlyError,
    BookieRestartedError,
    BookieUnavailableError,
    WalogError,
)
from walog.metadata import open_store
from walog.metadata.layout import decommission_path
from walog.testing import LocalCluster
from walog.wire.durability import Durability
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

CONFIG = ClientConfig(timeouts=Timeouts(add=10.0, read=5.0, explicit_lac=0.05))
# Background flushes of VOLATILE data are pushed far out so every sync a test sees comes
# from a force or a PERSISTENT add.
SLOW_FLUSH = ["--volatile-flush-interval-s", "3600"]
# No checkpoint either (it syncs the journal, and with it the VOLATILE entries).
NO_CHECKPOINT = ["--checkpoint-interval-s", "3600"]


@pytest.fixture
def quiet_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, "sqlite", data_dir=tmp_path / "c", bookie_args=SLOW_FLUSH) as local:
        yield local


def journal_syncs(cluster: LocalCluster) -> list[int]:
    """The journal fdatasync counter of every bookie (Info RPC)."""
    counts = []
    for i in range(len(cluster.bookie_ids)):
        with cluster.bookie(i).channel() as channel:
            info = pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)
            counts.append(info.journal_syncs)
    return counts


def kill_and_restart_every_bookie(cluster: LocalCluster) -> None:
    for i in range(len(cluster.bookie_ids)):
        cluster.kill(i)
    for i in range(len(cluster.bookie_ids)):
        cluster.restart(i, wait=False)
    for i in range(len(cluster.bookie_ids)):
        cluster.wait_ready(i)


async def test_volatile_appends_do_not_sync_and_force_does(quiet_cluster: LocalCluster) -> None:
    async with await aio.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        writer = await client.create_ledger(3, 3, 2, durability=Durability.VOLATILE)
        # The first add of a ledger persists its master key (a sync, by rule), and it may
        # still be under way on the bookie outside the ack quorum: a force waits for every
        # bookie. From then on, VOLATILE adds must not sync.
        await writer.append(b"v0")
        assert await writer.force() == 0
        before = journal_syncs(quiet_cluster)
        for i in range(1, 200):
            await writer.append(b"v%d" % i)
        assert journal_syncs(quiet_cluster) == before, "a VOLATILE add triggered a sync"
        # Only entry 0 was synced (by the force), so the LAC cannot pass it although
        # 200 adds were acknowledged (seed 004's LAC rule).
        assert writer.last_add_confirmed == 0
        assert await writer.force() == 199
        after = journal_syncs(quiet_cluster)
        assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
        assert writer.last_add_confirmed == 199
        await writer.close()


async def test_forced_entries_survive_sigkill_of_every_bookie(
    quiet_cluster: LocalCluster,
) -> None:
    async with await aio.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        writer = await client.create_ledger(3, 3, 2, durability=Durability.VOLATILE)
        ledger_id = writer.ledger_id
        for i in range(300):
            await writer.append(b"forced-%d" % i)
        forced = await writer.force()
        assert forced == 299
        for i in range(300, 320):  # never forced: may or may not survive
            await writer.append(b"loose-%d" % i)

    kill_and_restart_every_bookie(quiet_cluster)

    async with await aio.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        reader = await client.open_ledger(ledger_id, recovery=True)
        assert reader.is_closed
        last = reader.last_add_confirmed
        assert last >= forced
        entries = await reader.read(0, last)
        # A gap-free prefix containing every forced entry.
        assert [e.entry_id for e in entries] == list(range(last + 1))
        assert [e.data for e in entries[: forced + 1]] == [b"forced-%d" % i for i in range(300)]


async def test_mixed_traffic_keeps_each_ledgers_promise(quiet_cluster: LocalCluster) -> None:
    async with await aio.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        persistent = await client.create_ledger(3, 3, 2)
        volatile = await client.create_ledger(3, 3, 2, durability=Durability.VOLATILE)
        for i in range(100):
            volatile.append_nowait(b"v%d" % i)
            await persistent.append(b"p%d" % i)
        await volatile.append(b"v-last")
        # PERSISTENT entries are durable on their acks; VOLATILE ones only once synced.
        assert persistent.last_add_confirmed == 99
        ids = (persistent.ledger_id, volatile.ledger_id)

    kill_and_restart_every_bookie(quiet_cluster)

    async with await aio.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        reader = await client.open_ledger(ids[0], recovery=True)
        assert reader.last_add_confirmed >= 99
        assert [e.data for e in await reader.read(0, 99)] == [b"p%d" % i for i in range(100)]
        # The unforced VOLATILE ledger recovers to some gap-free prefix (maybe empty).
        vreader = await client.open_ledger(ids[1], recovery=True)
        last = vreader.last_add_confirmed
        if last >= 0:
            got = [e.entry_id for e in await vreader.read(0, last)]
            assert got == list(range(last + 1))


# -- a clean close of a VOLATILE ledger (seed 000 "Closing a ledger as a writer": the close
# records the last entry acknowledged to the client; seed 004 gets there by syncing first) --


def test_closing_a_volatile_ledger_records_every_acknowledged_entry(
    quiet_cluster: LocalCluster,
) -> None:
    with walog.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        writer = client.create_ledger(3, 3, 2, durability=Durability.VOLATILE)
        assert [writer.append(b"e%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        writer.close()
        assert writer.metadata.state == "CLOSED"
        assert writer.metadata.last_entry_id == 4
        reader = client.open_ledger(writer.ledger_id)
        assert reader.last_add_confirmed == 4
        assert [e.data for e in reader.read(0, 4)] == [b"e%d" % i for i in range(5)]


def test_a_volatile_close_that_cannot_sync_fails_and_leaves_the_ledger_open(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(4, "sqlite", data_dir=tmp_path / "c", bookie_args=SLOW_FLUSH)
    with cluster, walog.connect(cluster.metadata_uri, config=CONFIG) as client:
        # Qa = 3: with one bookie down the force before the close cannot reach Qa syncs
        # (and recovery writes back to the fourth bookie in its place).
        writer = client.create_ledger(3, 3, 3, durability=Durability.VOLATILE)
        assert [writer.append(b"e%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        cluster.kill(writer.metadata.last_ensemble[0])
        with pytest.raises(BookieUnavailableError, match="stays OPEN"):
            writer.close()
        assert client.ledger_metadata(writer.ledger_id).state == "OPEN"
        # Recovery closes it with every acknowledged entry (the two bookies up hold them).
        reader = client.open_ledger(writer.ledger_id, recovery=True)
        assert reader.last_add_confirmed == 4
        assert [e.data for e in reader.read(0, 4)] == [b"e%d" % i for i in range(5)]


def test_a_volatile_log_keeps_every_acknowledged_record_through_roll_and_close(
    quiet_cluster: LocalCluster,
) -> None:
    with walog.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        log = client.open_log("volatile", durability=Durability.VOLATILE)
        with log.open_writer() as writer:
            first = [writer.append(b"a%d" % i) for i in range(5)]
            writer.roll()
            second = [writer.append(b"b%d" % i) for i in range(5)]
        segments = log.segments()
        assert [s.state for s in segments] == ["CLOSED", "CLOSED"]
        assert [s.last_entry_id for s in segments] == [first[-1].entry_id, second[-1].entry_id]
        with log.open_reader("earliest") as reader:
            got = []
            while (record := reader.read_next(timeout=1.0)) is not None:
                got.append(record.data)
        assert got == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)]


def test_flushing_a_volatile_log_forces_its_acknowledged_records(
    quiet_cluster: LocalCluster,
) -> None:
    with walog.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        log = client.open_log("volatile-flush", durability=Durability.VOLATILE)
        with log.open_writer() as writer:
            writer.append(b"first")  # its ledger's first add persists the master key
            writer.flush()
            before = journal_syncs(quiet_cluster)
            positions = writer.append_many(b"r%d" % i for i in range(50))
            assert journal_syncs(quiet_cluster) == before, "a VOLATILE append synced"
            writer.flush()
            after = journal_syncs(quiet_cluster)
            assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
            ledger = client.open_ledger(positions[-1].ledger_id, recovery=False)
            # The LAC the bookies know covers the last record: it was synced on Qa bookies.
            assert ledger.read_last_add_confirmed() >= positions[-1].entry_id


def test_a_volatile_log_flush_that_cannot_sync_on_ack_quorum_bookies_fails(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(4, "sqlite", data_dir=tmp_path / "c", bookie_args=SLOW_FLUSH)
    with cluster, walog.connect(cluster.metadata_uri, config=CONFIG) as client:
        log = client.open_log("volatile-down", ack_quorum=3, durability=Durability.VOLATILE)
        writer = log.open_writer()
        position = writer.append(b"acknowledged")
        cluster.kill(client.ledger_metadata(position.ledger_id).last_ensemble[0])
        with pytest.raises(WalogError, match="cannot replace bookies"):
            writer.flush()
        writer.close()  # by recovery, which keeps the acknowledged record
        assert [s.state for s in log.segments()] == ["CLOSED"]
        with log.open_reader("earliest") as reader:
            record = reader.read_next(timeout=10.0)
            assert record is not None and record.data == b"acknowledged"


def test_a_volatile_writer_stops_with_bookie_read_only_error_when_a_bookie_turns_read_only(
    quiet_cluster: LocalCluster,
) -> None:
    # Seed 004: a VOLATILE ledger never changes its ensemble, so a bookie that turns
    # read-only (here: marked for decommissioning) ends its writer, with the error that says so.
    with walog.connect(quiet_cluster.metadata_uri, config=CONFIG) as client:
        writer = client.create_ledger(3, 3, 2, durability=Durability.VOLATILE)
        writer.append(b"before")
        victim = writer.metadata.last_ensemble[0]

        async def mark() -> None:
            store = await open_store(quiet_cluster.metadata_uri)
            try:
                await store.create(decommission_path(victim), b"")
            finally:
                await store.close()

        walog._loop.run(mark())
        deadline = time.monotonic() + 30
        with pytest.raises(BookieReadOnlyError, match=f"bookie {victim} turned read-only"):
            while time.monotonic() < deadline:  # the bookie follows its mark within a moment
                writer.append(b"more")
        assert isinstance(BookieReadOnlyError("x"), walog.BookieError)


# -- bookies that restart between two appends: an answer from a bookie that lost entries it
# acknowledged must stop the writer before it counts (nothing acknowledged after the loss) --


def test_a_volatile_writer_acknowledges_nothing_after_its_bookies_lost_acknowledged_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A killed bookie loses nothing by itself: its unsynced journal writes stay in the
    # kernel's page cache and the restart replays them. A crash of its machine loses them;
    # the bookies here run with a page cache of their own (tests/integration/shims/
    # pagecache.c) that holds their journal writes until synced and dies with the process.
    data = (tmp_path / "c").resolve()
    for name, value in page_cache_lost_on_kill(tmp_path, f"{data}/bookies/*/journal/*").items():
        monkeypatch.setenv(name, value)
    cluster = LocalCluster(3, "sqlite", data_dir=data, bookie_args=[*SLOW_FLUSH, *NO_CHECKPOINT])
    with cluster, walog.connect(cluster.metadata_uri, config=CONFIG) as client:
        # Qa = Qw: an append completes once every bookie answered it, so nothing is in
        # flight when the bookies are killed (an add in flight would stop the writer anyway).
        writer = client.create_ledger(3, 3, 3, durability=Durability.VOLATILE)
        assert [writer.append(b"e%d" % i) for i in range(10)] == list(range(10))
        assert writer.last_add_confirmed < 9, "the entries were synced: nothing to lose"
        kill_and_restart_every_bookie(cluster)

        with pytest.raises(BookieRestartedError, match=f"ledger {writer.ledger_id}") as stopped:
            writer.append(b"after the loss")
        assert any(f"bookie {b} restarted" in str(stopped.value) for b in cluster.bookie_ids)
        with pytest.raises(BookieRestartedError):
            writer.append(b"later still")

        # The bookies did lose acknowledged entries: recovery closes the ledger at what they
        # still hold, a gap-free prefix without the appends refused after the loss.
        reader = client.open_ledger(writer.ledger_id, recovery=True)
        last = reader.last_add_confirmed
        assert last < 9
        held = [e.data for e in reader.read(0, last)] if last >= 0 else []
        assert held == [b"e%d" % i for i in range(last + 1)]


def test_a_volatile_writer_goes_on_after_its_bookies_restart_without_losing_entries(
    tmp_path: Path,
) -> None:
    # The same kill and restart without the shim: the kernel kept the unsynced writes, the
    # restart replayed and synced them, and the writer goes on.
    cluster = LocalCluster(
        3, "sqlite", data_dir=tmp_path / "c", bookie_args=[*SLOW_FLUSH, *NO_CHECKPOINT]
    )
    with cluster, walog.connect(cluster.metadata_uri, config=CONFIG) as client:
        writer = client.create_ledger(3, 3, 3, durability=Durability.VOLATILE)
        assert [writer.append(b"e%d" % i) for i in range(10)] == list(range(10))
        kill_and_restart_every_bookie(cluster)

        assert writer.append(b"e10") == 10
        assert writer.force() == 10
        writer.close()
        reader = client.open_ledger(writer.ledger_id)
        assert [e.data for e in reader.read(0, 10)] == [b"e%d" % i for i in range(11)]

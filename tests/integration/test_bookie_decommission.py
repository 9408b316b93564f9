"""``walog bookie decommission ID`` drains a running bookie: afterwards no ledger names it,
every ledger has its write quorum of copies on the other bookies, an open ledger's writer
moved away without an error, and the bookie can be stopped with nothing under-replicated.
While it still runs, the bookie is a source for the copies it holds (they may be the only
ones left); and it repairs a ledger only under the auto-recovery workers' lock of it."""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import walog
import walog.aio
from tests.integration.disks import read_entries, wait_until
from walog.autorecovery.decommission import DecommissionError, decommission
from walog.autorecovery.replicate import recover
from walog.config import ClientConfig, Timeouts
from walog.ledger.quorum import write_set
from walog.main import main as walog_main
from walog.metadata.layout import LedgerMetadata, cookie_path, decommission_path, repair_lock_path
from walog.testing import LocalCluster, ZooKeeperServer

LEDGERS = 100
ENTRIES = 5
CONFIG = ClientConfig(timeouts=Timeouts(add=5.0, read=5.0))


def _data(ledger: int, entry: int) -> bytes:
    return b"ledger %d entry %d" % (ledger, entry)


def test_decommission_of_a_bookie_holding_100_ledgers_leaves_each_at_qw_copies(
    tmp_path: Path,
) -> None:
    with LocalCluster(bookies=4, data_dir=tmp_path / "cluster") as cluster:
        client = cluster.connect()
        with client:
            ledger_ids = []
            for _ in range(LEDGERS):
                with client.create_ledger(3, 3, 2) as writer:
                    for entry in range(ENTRIES):
                        writer.append(_data(writer.ledger_id, entry))
                    ledger_ids.append(writer.ledger_id)
            held = collections.Counter(
                b for i in ledger_ids for b in client.ledger_metadata(i).ensembles[0][1]
            )
            victim = held.most_common(1)[0][0]
            # An open ledger on the victim, written to while the bookie drains.
            writer = client.create_ledger(3, 3, 2)
            while victim not in writer.metadata.ensembles[0][1]:
                writer.close()
                writer = client.create_ledger(3, 3, 2)
            stop = threading.Event()
            appended: list[int] = []

            def keep_writing() -> None:
                while not stop.is_set():
                    appended.append(writer.append(b"open %d" % len(appended)))
                    stop.wait(0.05)

            background = threading.Thread(target=keep_writing)
            background.start()
            try:
                wait_until(lambda: len(appended) >= 5, "the open ledger is written to")
                status = walog_main(
                    [
                        "bookie",
                        "decommission",
                        victim,
                        "--metadata",
                        cluster.metadata_uri,
                        "--wait",
                        "120",
                    ]
                )
            finally:
                stop.set()
                background.join()
            assert status == 0
            writer.close()
            assert appended == list(range(len(appended)))

            for ledger_id in [*ledger_ids, writer.ledger_id]:
                metadata = client.ledger_metadata(ledger_id)
                assert all(victim not in ens for _, ens in metadata.ensembles), ledger_id
                for first, last, ensemble in metadata.fragment_bounds():
                    assert len(set(ensemble)) == 3
                    for entry in range(first, min(last, metadata.last_entry_id) + 1):
                        for index in write_set(entry, 3, 3):
                            copy = read_entries(
                                cluster.bookie(ensemble[index]), ledger_id, entry, entry
                            )
                            assert len(copy) == 1, (ledger_id, entry, ensemble[index])
            for ledger_id in ledger_ids:
                with client.open_ledger(ledger_id) as reader:
                    got = [e.data for e in reader.read(0, ENTRIES - 1)]
                    assert got == [_data(ledger_id, i) for i in range(ENTRIES)]

            assert victim in client.read_only_bookies() or victim not in client.bookies()
            cluster.stop(victim)
            assert victim not in client.bookies() + client.read_only_bookies()

            async def audit() -> tuple[int | None, int | None, set[str]]:
                async_client = await walog.aio.connect(cluster.metadata_uri)
                try:
                    store = async_client.ctx.store
                    report = await recover(async_client.ctx, passwords=[b""])
                    return (
                        await store.exists(cookie_path(victim)),
                        await store.exists(decommission_path(victim)),
                        report.missing,
                    )
                finally:
                    await async_client.close()

            cookie, mark, missing = walog._loop.run(audit())
            assert cookie is None, "the cookie of a decommissioned bookie is removed"
            assert mark is not None
            assert missing == set(), "nothing under-replicated once the bookie is gone"


@pytest.fixture
def zk_bookies(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[LocalCluster]:
    """Five real bookies on the session's ZooKeeper (a chroot of their own), this test's."""
    uri = zookeeper.uri(f"/decommission-{uuid.uuid4().hex[:12]}", session_timeout=4)
    with LocalCluster(bookies=5, metadata=uri, data_dir=tmp_path / "cluster") as started:
        yield started


async def _closed_ledger(client: walog.aio.AsyncClient, quorums: tuple[int, int, int]) -> int:
    writer = await client.create_ledger(*quorums)
    for entry in range(20):
        await writer.append(_data(writer.ledger_id, entry))
    await writer.close()
    return writer.ledger_id


async def _reads_back(client: walog.aio.AsyncClient, ledger_id: int) -> None:
    reader = await client.open_ledger(ledger_id)
    got = [e.data for e in await reader.read(0, 19)]
    assert got == [_data(ledger_id, entry) for entry in range(20)]


def _no_bookie_twice(metadata: LedgerMetadata) -> None:
    for first, ensemble in metadata.ensembles:
        assert len(set(ensemble)) == len(ensemble), (metadata.ledger_id, first, ensemble)


async def test_a_retiring_bookie_is_a_source_for_the_copies_only_it_still_holds(
    zk_bookies: LocalCluster,
) -> None:
    cluster = zk_bookies
    async with await walog.aio.connect(cluster.metadata_uri, config=CONFIG) as client:
        ledger_id = await _closed_ledger(client, (2, 2, 2))
        retiring, other = (await client.ledger_metadata(ledger_id)).last_ensemble
        # The other copy of every entry is gone with its bookie: only the retiring bookie
        # holds the ledger now.
        cluster.stop(other)

        moved = await decommission(client, retiring, timeout_s=30.0, interval_s=0.2)

        assert moved == 1
        metadata = await client.ledger_metadata(ledger_id)
        assert retiring not in metadata.last_ensemble and other not in metadata.last_ensemble
        _no_bookie_twice(metadata)
        # Stopped, the retiring bookie takes nothing with it: the copies were made.
        cluster.stop(retiring)
        await _reads_back(client, ledger_id)


async def test_decommission_repairs_a_ledger_only_under_the_autorecovery_workers_lock(
    zk_bookies: LocalCluster,
) -> None:
    cluster = zk_bookies
    async with await walog.aio.connect(cluster.metadata_uri, config=CONFIG) as client:
        ledger_id = await _closed_ledger(client, (3, 3, 2))
        before = await client.ledger_metadata(ledger_id)
        retiring, _, lost = before.last_ensemble
        cluster.stop(lost)
        async with await walog.aio.connect(cluster.metadata_uri, config=CONFIG) as worker:
            # An auto-recovery worker took the ledger (walog/autorecovery/daemon.py takes
            # it with this very call) to replace the lost bookie.
            lock = repair_lock_path(ledger_id)
            await worker.ctx.store.register(lock, b"autorecovery worker")

            with pytest.raises(DecommissionError, match=rf"locked: {ledger_id}\b"):
                await decommission(client, retiring, timeout_s=2.0, interval_s=0.2)
            assert await client.ledger_metadata(ledger_id) == before, (
                "decommission changed a ledger whose repair lock a worker held"
            )

            # The worker's repair, from the metadata as it reads it under its lock.
            report = await recover(
                worker.ctx, is_lost=lambda bookie: bookie == lost, ledgers={ledger_id}
            )
            assert [(d.ledger_id, d.lost) for d, _ in report.repaired] == [(ledger_id, (2,))]
            _no_bookie_twice(await client.ledger_metadata(ledger_id))
            await worker.ctx.store.unregister(lock)

        moved = await decommission(client, retiring, timeout_s=30.0, interval_s=0.2)

        assert moved == 1
        metadata = await client.ledger_metadata(ledger_id)
        assert not {retiring, lost} & set(metadata.last_ensemble)
        _no_bookie_twice(metadata)
        await _reads_back(client, ledger_id)

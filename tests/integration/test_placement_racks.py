"""Rack-aware placement against real bookie processes started with ``--rack``: the rack is
registered and announced, new ensembles span every rack, and both a writer's ensemble
change and autorecovery replace a lost bookie with one of the rack it left empty."""

from __future__ import annotations

import collections
import io
from collections.abc import AsyncIterator, Iterator
from contextlib import redirect_stdout

import pytest

import walog.aio as aio
from walog.autorecovery import recover
from walog.config import ClientConfig, Timeouts
from walog.main import main as walog_main
from walog.testing import LocalCluster
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

RACKS = ["rack-a", "rack-b", "rack-c"]
CONFIG = ClientConfig(timeouts=Timeouts(add=3.0, read=5.0))


@pytest.fixture(scope="module")
def racked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Six bookies, two per rack (bookie n in RACKS[n % 3]); a test that stops one
    restarts it before it ends."""
    data_dir = tmp_path_factory.mktemp("racked")
    with LocalCluster(bookies=6, racks=RACKS, data_dir=data_dir) as local:
        yield local


@pytest.fixture
async def client(racked: LocalCluster) -> AsyncIterator[aio.AsyncClient]:
    async with await aio.connect(racked.metadata_uri, config=CONFIG) as c:
        yield c


def _rack_of(cluster: LocalCluster, bookie: str) -> str:
    return RACKS[cluster.bookie_ids.index(bookie) % len(RACKS)]


async def test_a_bookies_rack_is_registered_and_shown_by_walog_bookies_and_info(
    racked: LocalCluster, client: aio.AsyncClient
) -> None:
    expected = {b: _rack_of(racked, b) for b in racked.bookie_ids}
    assert await client.bookie_racks() == expected
    out = io.StringIO()
    with redirect_stdout(out):
        assert walog_main(["bookies", "--metadata", racked.metadata_uri]) == 0
    rows = [f"{b} writable {r}" for b, r in sorted(expected.items())]
    assert out.getvalue().splitlines() == rows
    with racked.bookie(4).channel() as channel:
        info = pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)
    assert info.rack == RACKS[1]


async def test_new_ensembles_put_each_write_quorum_on_every_rack(
    racked: LocalCluster, client: aio.AsyncClient
) -> None:
    used: collections.Counter[str] = collections.Counter()
    for quorums in [(3, 3, 2)] * 4 + [(6, 3, 2), (6, 2, 2)]:
        writer = await client.create_ledger(*quorums)
        ensemble = writer.metadata.last_ensemble
        e, qw = quorums[0], quorums[1]
        for start in range(e):
            spanned = {_rack_of(racked, ensemble[(start + i) % e]) for i in range(qw)}
            assert len(spanned) == qw, ensemble
        used.update(ensemble)
        await writer.close()
    assert set(used) == set(racked.bookie_ids)


async def test_an_ensemble_change_replaces_a_failed_bookie_from_its_own_rack(
    racked: LocalCluster, client: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    assert await writer.append(b"before") == 0
    failed = writer.metadata.last_ensemble[1]
    racked.kill(failed)
    try:
        for i in range(5):
            await writer.append(b"after-%d" % i)
        new_ensemble = writer.metadata.last_ensemble
        assert failed not in new_ensemble
        assert sorted(_rack_of(racked, b) for b in new_ensemble) == RACKS
        await writer.close()
    finally:
        racked.restart(failed)


async def test_autorecovery_replaces_a_lost_bookie_from_its_own_rack(
    racked: LocalCluster, client: aio.AsyncClient
) -> None:
    writer = await client.create_ledger(3, 3, 2)
    for i in range(10):
        await writer.append(b"entry-%d" % i)
    await writer.close()
    lost = writer.metadata.last_ensemble[0]
    racked.stop(lost)  # a clean stop unregisters: the bookie is no longer available
    try:
        report = await recover(client.ctx, is_lost=lambda bookie: bookie == lost)
    finally:
        racked.restart(lost)
    # Other tests' ledgers on the lost bookie are in the report too (those over all six
    # bookies cannot be repaired): look at this one's.
    assert not [
        u for u in report.unrepairable if getattr(u[0], "ledger_id", None) == writer.ledger_id
    ]
    [replacements] = [r for d, r in report.repaired if d.ledger_id == writer.ledger_id]
    [replacement] = replacements.values()
    assert _rack_of(racked, replacement) == _rack_of(racked, lost)
    repaired = (await client.ledger_metadata(writer.ledger_id)).last_ensemble
    assert sorted(_rack_of(racked, b) for b in repaired) == RACKS
    reader = await client.open_ledger(writer.ledger_id)
    assert [e.data for e in await reader.read(0, 9)] == [b"entry-%d" % i for i in range(10)]

"""``ListEntries`` against a real bookie process, over both transports (native port and
gRPC): which entries of a ledger the bookie holds, as ranges, from its index and write
cache alone; refused without the bookie's bearer token as reads are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from bookie.config import BookieConfig
from bookie.server import service
from bookie.server.grpc_port import BookieServer
from bookie.storage.engine import BookieCore
from tests.integration.bookies import BookieProcess
from tests.integration.waiting import eventually
from walog.config import ClientConfig, Timeouts
from walog.errors import BookieCallUnsupportedError, UnauthorizedError
from walog.metadata import open_store
from walog.metadata.layout import ledger_path
from walog.testing import free_port
from walog.transport.codec import translate_rpc_error
from walog.transport.network import NetworkBookieClient, NetworkBookiePool
from walog.wire.digest import entry_digest, master_key
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.status import Status

TOKEN = "s3cret"
KEY = master_key(b"")
KEPT, DELETED = 10, 11
"""A ledger whose metadata exists, and one whose metadata does not (the GC drops it)."""
HELD = ((0, 4), (7, 7), (9, 11))


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[BookieProcess]:
    """One bookie that asks for a bearer token and collects deleted ledgers at once."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    process = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=[
            "--auth-token-file", str(tmp_path / "token"),
            "--gc-interval-s", "0.2", "--gc-grace-s", "0",
        ],
    )  # fmt: skip
    try:
        yield process.start().wait_ready()
    finally:
        process.stop_quietly()


@pytest.fixture(params=["native", "grpc"])
async def pool(request: pytest.FixtureRequest) -> AsyncIterator[NetworkBookiePool]:
    """A pool whose calls go over the bookie's native port, or over gRPC only."""
    config = ClientConfig(
        timeouts=Timeouts(add=10.0, read=10.0), native_transport=request.param == "native"
    )
    connections = NetworkBookiePool(config, auth_token=TOKEN)
    yield connections
    await connections.close()


async def _add(client: NetworkBookieClient, ledger_id: int, entry_ids: list[int]) -> None:
    replies = await asyncio.gather(
        *(
            client.add(
                ledger_id, i, -1, b"e%d" % i, entry_digest(ledger_id, i, -1, b"e%d" % i), KEY
            )
            for i in entry_ids
        )
    )
    assert {r.status for r in replies} == {Status.OK}


async def _with_gaps(bookie: BookieProcess, client: NetworkBookieClient) -> None:
    store = await open_store(bookie.metadata)
    try:
        await store.create(ledger_path(KEPT), b"{}")
    finally:
        await store.close()
    await _add(client, KEPT, [i for first, last in HELD for i in range(first, last + 1)])


async def test_a_bookie_lists_the_entries_it_holds_as_ranges_in_cache_and_in_its_index(
    bookie: BookieProcess, pool: NetworkBookiePool
) -> None:
    client = pool.get(bookie.bookie_id)
    await _with_gaps(bookie, client)
    assert client.transport == ("native" if pool.config.native_transport else "grpc")
    for _ in range(2):  # in the write cache, then (after a restart) in index run rows
        reply = await client.list_entries(KEPT, 0, 1000)
        assert (reply.status, reply.ranges) == (Status.OK, HELD)
        reply = await client.list_entries(KEPT, 3, 9)
        assert (reply.status, reply.ranges) == (Status.OK, ((3, 4), (7, 7), (9, 9)))
        assert (await client.list_entries(KEPT, 5, 6)).ranges == ()
        await asyncio.to_thread(bookie.terminate)  # a clean stop checkpoints
        await asyncio.to_thread(bookie.restart)
    assert (await client.list_entries(99, 0, 10)).status is Status.NO_SUCH_LEDGER
    assert (await client.list_entries(KEPT, 5, 2)).status is Status.BAD_REQUEST
    assert (await client.list_entries(KEPT, -1, 2)).status is Status.BAD_REQUEST


async def test_a_fenced_ledger_lists_its_entries_and_a_deleted_one_none(
    bookie: BookieProcess, pool: NetworkBookiePool
) -> None:
    client = pool.get(bookie.bookie_id)
    await _with_gaps(bookie, client)
    assert (await client.fence(KEPT, KEY)).status is Status.OK
    assert (await client.list_entries(KEPT, 0, 1000)).ranges == HELD
    await _add(client, DELETED, [0, 1, 2])

    async def collected() -> None:
        # The GC runs in the bookie process (every 0.2 s): its effect shows by asking again.
        reply = await client.list_entries(DELETED, 0, 10)
        assert (reply.status, reply.ranges) == (Status.NO_SUCH_LEDGER, ())

    await eventually(collected, within=30)
    assert (await client.list_entries(KEPT, 0, 1000)).ranges == HELD


async def test_listing_entries_needs_the_bookies_token_as_reading_does(
    bookie: BookieProcess, pool: NetworkBookiePool
) -> None:
    await _with_gaps(bookie, pool.get(bookie.bookie_id))
    wrong = NetworkBookiePool(pool.config, auth_token="wrong")
    try:
        client = wrong.get(bookie.bookie_id)
        with pytest.raises(UnauthorizedError):
            await client.list_entries(KEPT, 0, 10)
        with pytest.raises(UnauthorizedError):
            await client.read(KEPT, 0, 0)
    finally:
        await wrong.close()


async def test_a_call_the_bookie_does_not_know_reads_as_unsupported(bookie: BookieProcess) -> None:
    # What a bookie of a version without ListEntries answers it: UNIMPLEMENTED, which the
    # client tells apart from an unreachable bookie (it then checks by reads).
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        unknown = channel.unary_unary(
            "/walog.bookie.v1.Bookie/NoSuchCall",
            request_serializer=pb.ListEntriesRequest.SerializeToString,
            response_deserializer=pb.ListEntriesResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as refused:
            await unknown(
                pb.ListEntriesRequest(ledger_id=KEPT, last_entry_id=1),
                metadata=(("authorization", f"Bearer {TOKEN}"),),
                timeout=10,
            )
    assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
    error = translate_rpc_error(bookie.bookie_id, refused.value)
    assert isinstance(error, BookieCallUnsupportedError)


async def test_a_list_longer_than_one_answer_comes_in_several_that_the_client_joins(
    tmp_path: Path, pool: NetworkBookiePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In process, to make an answer's limit small enough to reach with a few entries.
    monkeypatch.setattr(service, "MAX_LISTED_RANGES", 2)
    config = BookieConfig(
        data_dir=tmp_path / "bookie",
        listen=f"127.0.0.1:{free_port()}",
        metadata=f"sqlite:///{tmp_path}/meta.db",
    )
    core = await BookieCore.open(config.storage_config())
    server = BookieServer(config, core, "instance")
    await server.start()
    try:
        client = pool.get(config.listen)
        await _add(client, KEPT, [0, 2, 4, 6, 8])
        reply = await client.list_entries(KEPT, 1, 100)
        assert (reply.status, reply.ranges) == (Status.OK, ((2, 2), (4, 4), (6, 6), (8, 8)))
        assert server.service.stats.entry_lists == 2  # 2..4, then 5..100
    finally:
        await pool.close()
        await server.stop_now()
        await core.close()

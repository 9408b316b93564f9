"""The transport the writer uses, native and gRPC, against real bookie processes: batched
frames, broken streams, the liveness timeout and lazy reconnection."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_fixed

import walog.aio
from walog.config import ClientConfig, Timeouts
from walog.errors import BookieUnavailableError
from walog.testing import LocalCluster
from walog.transport import add_stream, codec
from walog.transport.network import NetworkBookiePool
from walog.wire.digest import entry_digest, master_key
from walog.wire.packing import unpack_entries
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.status import Status

KEY = master_key(b"")
CONFIG = ClientConfig(timeouts=Timeouts(add=1.0, read=5.0))


@pytest.fixture(params=[True, False], ids=["native", "grpc"])
async def pool(request: pytest.FixtureRequest) -> AsyncIterator[NetworkBookiePool]:
    bookies = NetworkBookiePool(dataclasses.replace(CONFIG, native_transport=request.param))
    yield bookies
    await bookies.close()


@pytest.fixture(params=[True, False], ids=["native", "grpc"])
async def patient_pool(request: pytest.FixtureRequest) -> AsyncIterator[NetworkBookiePool]:
    """A pool whose adds wait 10 s: 2,000 adds at once can take longer than the module's
    1 s on a busy machine, and no test using it waits out a time-out."""
    timeouts = Timeouts(add=10.0, read=10.0)
    config = dataclasses.replace(CONFIG, timeouts=timeouts, native_transport=request.param)
    bookies = NetworkBookiePool(config)
    yield bookies
    await bookies.close()


def _add(pool: NetworkBookiePool, bookie: str, ledger_id: int, entry_id: int) -> Any:
    data = b"entry-%d" % entry_id
    lac = entry_id - 1
    return pool.get(bookie).add(
        ledger_id, entry_id, lac, data, entry_digest(ledger_id, entry_id, lac, data), KEY
    )


async def test_adds_travel_in_batched_frames(
    cluster: LocalCluster, patient_pool: NetworkBookiePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = patient_pool
    frames: list[int] = []
    build = codec.build_frame

    def counting(*args: Any) -> Any:
        frame, sent = build(*args)
        frames.append(sum(len(batch.entry_ids) for batch in sent))
        return frame, sent

    monkeypatch.setattr(add_stream, "build_frame", counting)
    bookie = cluster.bookie_ids[0]
    replies = await asyncio.gather(*(_add(pool, bookie, 9_000_001, e) for e in range(2000)))
    assert all(r.status is Status.OK for r in replies)
    assert sum(frames) == 2000
    assert len(frames) <= 200, f"2000 adds took {len(frames)} frames"
    assert max(frames) <= CONFIG.max_frame_entries


async def test_broken_stream_fails_pending_adds_and_reconnects_lazily(
    fresh_cluster: LocalCluster, pool: NetworkBookiePool
) -> None:
    bookie = fresh_cluster.bookie_ids[0]
    assert (await _add(pool, bookie, 9_000_002, 0)).status is Status.OK
    fresh_cluster.kill(bookie)
    with pytest.raises(BookieUnavailableError, match=bookie):
        await _add(pool, bookie, 9_000_002, 1)
    fresh_cluster.restart(bookie)
    # A new stream is opened on the next add; the channel finds the bookie again.
    async for attempt in _retrying():
        with attempt:
            reply = await _add(pool, bookie, 9_000_002, 1)
    assert reply.status is Status.OK
    read = await pool.get(bookie).read(9_000_002, 0, 1)
    assert [e.entry_id for e in read.entries] == [0, 1]


async def test_unanswered_adds_fail_after_the_add_timeout(
    fresh_cluster: LocalCluster, pool: NetworkBookiePool
) -> None:
    bookie = fresh_cluster.bookie_ids[1]
    assert (await _add(pool, bookie, 9_000_003, 0)).status is Status.OK
    fresh_cluster.pause(bookie)
    try:
        with pytest.raises(BookieUnavailableError, match=r"no answer within 1\.0 seconds"):
            await asyncio.wait_for(_add(pool, bookie, 9_000_003, 1), timeout=30)
    finally:
        fresh_cluster.resume(bookie)
    async for attempt in _retrying():
        with attempt:
            reply = await _add(pool, bookie, 9_000_003, 1)
    assert reply.status is Status.OK


async def test_reads_verify_and_return_consecutive_entries(
    cluster: LocalCluster, pool: NetworkBookiePool
) -> None:
    bookie = cluster.bookie_ids[2]
    await asyncio.gather(*(_add(pool, bookie, 9_000_004, e) for e in range(5)))
    reply = await pool.get(bookie).read(9_000_004, 1, 3)
    assert reply.status is Status.OK
    assert [(e.entry_id, e.data, e.lac) for e in reply.entries] == [
        (1, b"entry-1", 0),
        (2, b"entry-2", 1),
        (3, b"entry-3", 2),
    ]
    lac = await pool.get(bookie).read_lac(9_000_004)
    assert lac.last_entry_id == 4
    assert lac.last_entry is not None and lac.last_entry.data == b"entry-4"


def _retrying() -> AsyncRetrying:
    """Retry while the restarted or resumed bookie is not reachable yet."""
    return AsyncRetrying(
        stop=stop_after_delay(20),
        wait=wait_fixed(0.1),
        retry=retry_if_exception_type(BookieUnavailableError),
        reraise=True,
    )


async def test_the_appends_of_one_turn_reach_each_bookie_as_one_batch_in_entry_order(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # E == Qw: each entry's write set lists the same bookies in another order; the adds must
    # still travel as one run per bookie (a bookie stores an in-order run without lookups).
    frames: list[list[int]] = []
    build = codec.build_frame
    three_sent = asyncio.Event()

    def recording(*args: Any) -> Any:
        frame, sent = build(*args)
        batches = pb.AddFrame.FromString(b"".join(frame)).batches
        frames.append([e[0] for b in batches for e in unpack_entries(b.entries)[0]])
        if sum(1 for ids in frames if ids) >= 3:
            three_sent.set()
        return frame, sent

    monkeypatch.setattr(add_stream, "build_frame", recording)
    client = await walog.aio.connect(cluster.metadata_uri, config=CONFIG)
    try:
        writer = await client.create_ledger(3, 3, 2)
        appends = [writer.append_nowait(b"x") for _ in range(30)]
        assert await asyncio.gather(*appends) == list(range(30))
        await writer.close()
        # Qa=2 acks may come before the third bookie's stream is even open: wait for it.
        await asyncio.wait_for(three_sent.wait(), 10)
    finally:
        await client.close()
    adds = [ids for ids in frames if ids]
    assert adds == [list(range(30))] * 3

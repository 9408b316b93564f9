"""A real bookie process keeps what it acknowledged: SIGKILL, torn journals, fences, digests."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from tests.integration.bookies import (
    Answer,
    BookieProcess,
    answers,
    batch_of,
    make_add,
    running_bookie,
    send_frames,
)
from walog.wire.digest import entry_digest, master_key
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc


def payload(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    """Deterministic contents, so a reader can check every byte after a crash."""
    unit = f"{ledger_id}:{entry_id};".encode()
    return (unit * (size // len(unit) + 1))[:size]


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[BookieProcess]:
    process = BookieProcess(tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db")
    process.start().wait_ready()
    yield process
    process.stop_quietly()


@pytest.fixture
async def stub(bookie: BookieProcess) -> AsyncIterator[pb_grpc.BookieStub]:
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        yield pb_grpc.BookieStub(channel)


async def read_all(stub: pb_grpc.BookieStub, ledger_id: int, last: int) -> list[pb.Entry]:
    """Every consecutive entry from 0 (up to ``last``), page by page (the bookie's default
    pages: each fits this plain channel's default 4 MiB message limit)."""
    entries: list[pb.Entry] = []
    while not entries or entries[-1].entry_id < last:
        first = len(entries)
        reply = await stub.Read(
            pb.ReadRequest(ledger_id=ledger_id, first_entry_id=first, last_entry_id=last)
        )
        if reply.status == pb.NO_SUCH_ENTRY and entries:
            break
        assert reply.status == pb.OK, reply
        entries.extend(reply.entries)
    return entries


def check_entries(entries: list[pb.Entry], ledger_id: int, size: int = 100) -> None:
    for position, entry in enumerate(entries):
        assert entry.entry_id == position
        assert entry.data == payload(ledger_id, entry.entry_id, size)
        assert entry.digest == entry_digest(ledger_id, entry.entry_id, entry.lac, entry.data)


async def test_acknowledged_entries_survive_sigkill_and_restart(
    bookie: BookieProcess, stub: pb_grpc.BookieStub
) -> None:
    ledger = 1
    frames = [
        pb.AddFrame(
            batches=[
                make_add(ledger, e, payload(ledger, e), lac=e - 1) for e in range(first, first + 50)
            ]
        )
        for first in range(0, 200, 50)
    ]
    results, _ = await send_frames(stub, frames)
    assert sorted(r.entry_id for r in results) == list(range(200))
    assert {r.status for r in results} == {pb.OK}

    assert bookie.kill() != 0
    bookie.restart()
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        entries = await read_all(pb_grpc.BookieStub(channel), ledger, 199)
    assert len(entries) == 200
    check_entries(entries, ledger)


@pytest.mark.slow  # a GiB written, replayed and read back: about 40 s here
@pytest.mark.timeout(900)
async def test_every_entry_acknowledged_before_a_sigkill_is_read_after_a_gib_of_replay(
    tmp_path: Path,
) -> None:
    """1 GiB of 1 KiB entries acknowledged and not checkpointed (a write cache larger than
    that, a checkpoint an hour), the bookie SIGKILLed: after its restart replays the whole
    GiB of journal, it serves every entry, byte for byte."""
    ledger, size, per_batch, per_stream = 9, 1024, 256, 64
    count = (1 << 30) // size
    args = ["--write-cache-bytes", "2GiB", "--checkpoint-interval-s", "3600"]
    metadata = f"sqlite:///{tmp_path}/meta.db"
    with running_bookie(tmp_path / "bookie", metadata, extra_args=args) as bookie:
        acked = 0
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            for start in range(0, count, per_batch * per_stream):
                frames = [
                    pb.AddFrame(
                        batches=[
                            batch_of(
                                ledger,
                                [
                                    (e, e - 1, entry_digest(ledger, e, e - 1, data), data)
                                    for e in range(first, first + per_batch)
                                    for data in (payload(ledger, e, size),)
                                ],
                                key=master_key(b""),
                            )
                        ]
                    )
                    for first in range(start, min(start + per_batch * per_stream, count), per_batch)
                ]
                results, _ = await send_frames(stub, frames)
                assert {r.status for r in results} == {pb.OK}
                acked += len(results)
        assert acked == count
        assert bookie.kill() != 0
        bookie.restart()
        opened = [line for line in bookie.log_tail(200).splitlines() if "storage opened" in line]
        replayed = json.loads(opened[-1])["replayed_bytes"]
        assert replayed > count * size, opened[-1]  # nothing had been checkpointed
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            entries = await read_all(pb_grpc.BookieStub(channel), ledger, count - 1)
        assert len(entries) == count
        check_entries(entries, ledger, size)


async def test_a_default_read_page_fits_a_plain_grpc_clients_default_message_limit(
    stub: pb_grpc.BookieStub,
) -> None:
    # 5 MiB of 1 KiB entries: a page of 4 MiB of payload alone would pass 4 MiB with the
    # entries' ids, LACs and digests; the bookie counts those too.
    ledger, size, count = 4, 1024, 5 * 1024
    frames = [
        pb.AddFrame(
            batches=[
                make_add(ledger, e, payload(ledger, e, size), lac=e - 1)
                for e in range(first, min(first + 256, count))
            ]
        )
        for first in range(0, count, 256)
    ]
    results, _ = await send_frames(stub, frames)
    assert {r.status for r in results} == {pb.OK}
    first_page = await stub.Read(
        pb.ReadRequest(ledger_id=ledger, first_entry_id=0, last_entry_id=count - 1)
    )
    assert first_page.status == pb.OK
    assert first_page.ByteSize() <= 4 * 1024 * 1024 < count * size
    entries = await read_all(stub, ledger, count - 1)
    assert len(entries) == count
    check_entries(entries, ledger, size)


async def test_sigkill_mid_write_leaves_a_journal_that_replays_cleanly(
    bookie: BookieProcess, stub: pb_grpc.BookieStub
) -> None:
    ledger, size = 2, 4096
    acked: set[int] = set()
    refused: list[Answer] = []
    enough = asyncio.Event()
    answered = asyncio.Event()

    async def writer() -> None:
        call = stub.Add()

        async def produce() -> None:
            entry_id = 0
            while True:  # until the bookie dies under it
                while entry_id - len(acked) - len(refused) > 2000:
                    answered.clear()  # keep a bounded number of adds in flight
                    await answered.wait()
                adds = [
                    make_add(ledger, e, payload(ledger, e, size), lac=-1)
                    for e in range(entry_id, entry_id + 20)
                ]
                entry_id += 20
                await call.write(pb.AddFrame(batches=adds))

        producer = asyncio.create_task(produce())
        try:
            async for response in call:
                for result in answers(response.results):
                    if result.status == pb.OK:
                        acked.add(result.entry_id)
                    else:
                        refused.append(result)
                answered.set()
                if len(acked) >= 300:
                    enough.set()
        except grpc.aio.AioRpcError:
            pass  # the bookie was killed: expected
        finally:
            producer.cancel()

    task = asyncio.create_task(writer())
    await asyncio.wait_for(enough.wait(), timeout=60)
    bookie.kill()  # adds are still streaming in: the journal's tail may be torn
    await asyncio.wait_for(task, timeout=30)
    assert not refused, refused[:3]

    bookie.restart()
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        entries = await read_all(pb_grpc.BookieStub(channel), ledger, max(acked) + 10_000)
    stored = {e.entry_id for e in entries}
    assert acked <= stored, f"lost acknowledged entries: {sorted(acked - stored)[:10]}"
    check_entries(entries, ledger, size)


async def test_fence_is_persisted_across_restart(
    bookie: BookieProcess, stub: pb_grpc.BookieStub
) -> None:
    ledger, key = 3, master_key(b"secret")
    adds = [
        make_add(ledger, e, payload(ledger, e), lac=e - 1, password=b"secret") for e in range(5)
    ]
    results, _ = await send_frames(stub, [pb.AddFrame(batches=adds)])
    assert {r.status for r in results} == {pb.OK}

    wrong = await stub.Fence(pb.FenceRequest(ledger_id=ledger, master_key=master_key(b"x")))
    assert wrong.status == pb.UNAUTHORIZED
    fenced = await stub.Fence(pb.FenceRequest(ledger_id=ledger, master_key=key))
    assert (fenced.status, fenced.last_entry_id) == (pb.OK, 4)

    bookie.kill()
    bookie.restart()
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        again = pb_grpc.BookieStub(channel)
        plain = make_add(ledger, 5, payload(ledger, 5), lac=4, password=b"secret")
        recovery = make_add(ledger, 5, payload(ledger, 5), lac=4, password=b"secret", recovery=True)
        (refused,), _ = await send_frames(again, [pb.AddFrame(batches=[plain])])
        assert refused.status == pb.FENCED
        # Recovery write-back bypasses the fence (seed 002).
        (written,), _ = await send_frames(again, [pb.AddFrame(batches=[recovery])])
        assert written.status == pb.OK
        read = await again.Read(pb.ReadRequest(ledger_id=ledger, first_entry_id=0, last_entry_id=5))
        assert read.fenced and len(read.entries) == 6


async def test_fencing_read_fences_before_answering(stub: pb_grpc.BookieStub) -> None:
    ledger, key = 4, master_key(b"")
    results, _ = await send_frames(stub, [pb.AddFrame(batches=[make_add(ledger, 0, b"a")])])
    assert results[0].status == pb.OK
    read = await stub.Read(
        pb.ReadRequest(
            ledger_id=ledger, first_entry_id=0, last_entry_id=0, fence=True, master_key=key
        )
    )
    assert read.status == pb.OK and read.fenced and len(read.entries) == 1
    (refused,), _ = await send_frames(
        stub, [pb.AddFrame(batches=[make_add(ledger, 1, b"b", lac=0)])]
    )
    assert refused.status == pb.FENCED


async def test_digest_mismatch_is_rejected_and_the_stream_goes_on(
    stub: pb_grpc.BookieStub,
) -> None:
    ledger = 5
    good = make_add(ledger, 0, b"payload")
    good_digest = entry_digest(ledger, 0, -1, b"payload")
    bad = make_add(ledger, 1, b"payload", lac=0, digest=good_digest)  # wrong header
    after = make_add(ledger, 1, b"payload", lac=0)
    results, _ = await send_frames(
        stub,
        [pb.AddFrame(batches=[good]), pb.AddFrame(batches=[bad]), pb.AddFrame(batches=[after])],
    )
    # Results come back in completion order: a refusal needs no journal sync.
    assert sorted((r.entry_id, r.status) for r in results) == [
        (0, pb.OK),
        (1, pb.OK),
        (1, pb.DIGEST_MISMATCH),
    ]


async def test_malformed_adds_answer_bad_request_and_the_stream_goes_on(
    stub: pb_grpc.BookieStub,
) -> None:
    torn = make_add(6, 0, b"x")
    torn.entries += b"\x00\x01\x02"  # stray bytes after the entry: the batch is malformed
    negative = batch_of(6, [(-5, -1, 0, b"x")], key=master_key(b""))
    short_key = make_add(6, 0, b"x")
    short_key.master_key = b"k"
    results, _ = await send_frames(
        stub,
        [
            pb.AddFrame(batches=[torn, negative, short_key]),
            pb.AddFrame(batches=[make_add(6, 0, b"x")]),
        ],
    )
    assert sorted(r.status for r in results) == sorted([pb.BAD_REQUEST] * 3 + [pb.OK])


async def test_one_sync_per_group_and_no_ack_before_its_sync(stub: pb_grpc.BookieStub) -> None:
    before = await stub.Info(pb.InfoRequest())
    # One entry alone: its ack may only come after a sync that covers it.
    (single,), _ = await send_frames(stub, [pb.AddFrame(batches=[make_add(7, 0, b"one")])])
    assert single.status == pb.OK
    after_one = await stub.Info(pb.InfoRequest())
    assert after_one.journal_syncs >= before.journal_syncs + 1

    # 200 entries in one frame reach the journal together: a handful of groups, each
    # synced once, not 200 syncs.
    adds = [make_add(7, e, payload(7, e), lac=e - 1) for e in range(1, 201)]
    results, _ = await send_frames(stub, [pb.AddFrame(batches=adds)])
    assert {r.status for r in results} == {pb.OK}
    after = await stub.Info(pb.InfoRequest())
    syncs = after.journal_syncs - after_one.journal_syncs
    groups = after.journal_groups - after_one.journal_groups
    assert 1 <= syncs <= 20, (syncs, groups)
    assert syncs <= groups


async def test_long_poll_returns_when_the_lac_passes_previous(stub: pb_grpc.BookieStub) -> None:
    ledger = 8
    await send_frames(stub, [pb.AddFrame(batches=[make_add(ledger, 0, b"a")])])
    poll = asyncio.ensure_future(
        stub.Read(
            pb.ReadRequest(
                ledger_id=ledger,
                first_entry_id=1,
                last_entry_id=1,
                previous_lac=-1,
                long_poll_timeout_ms=30_000,
            )
        )
    )
    # Entry 1 carries LAC 0 > previous_lac: the poll completes with it.
    await send_frames(stub, [pb.AddFrame(batches=[make_add(ledger, 1, b"b", lac=0)])])
    reply = await asyncio.wait_for(poll, timeout=20)
    assert reply.status == pb.OK and reply.lac == 0
    assert [e.entry_id for e in reply.entries] in ([], [1])


async def test_force_covers_the_volatile_adds_of_its_frame(stub: pb_grpc.BookieStub) -> None:
    ledger = 9
    adds = [make_add(ledger, e, payload(ledger, e), durability=pb.VOLATILE) for e in range(10)]
    force = pb.ForceRequest(ledger_id=ledger, request_id=77, master_key=master_key(b""))
    results, forces = await send_frames(stub, [pb.AddFrame(batches=adds, forces=[force])])
    assert {r.status for r in results} == {pb.OK}
    assert [(f.request_id, f.status) for f in forces] == [(77, pb.OK)]
    # Every add of the frame was synced by the force: the sync cursor covers them all.
    assert forces[0].last_add_synced == 9


async def test_every_add_and_force_answer_names_the_incarnation_which_a_restart_changes(
    bookie: BookieProcess, stub: pb_grpc.BookieStub
) -> None:
    ledger = 13
    key = master_key(b"")
    adds = [make_add(ledger, e, payload(ledger, e), durability=pb.VOLATILE) for e in range(3)]
    force = pb.ForceRequest(ledger_id=ledger, request_id=5, master_key=key)
    results, forces = await send_frames(stub, [pb.AddFrame(batches=adds, forces=[force])])
    assert {r.status for r in results} == {pb.OK} and len(forces) == 1
    (before,) = {r.incarnation for r in results} | {forces[0].incarnation}
    assert before != 0

    assert bookie.kill() != 0
    bookie.restart()
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        again = pb_grpc.BookieStub(channel)
        add = make_add(ledger, 3, payload(ledger, 3), durability=pb.VOLATILE)
        refused = make_add(ledger, 4, b"x", durability=pb.VOLATILE, digest=0)
        results, _ = await send_frames(again, [pb.AddFrame(batches=[add, refused])])
    assert sorted(r.status for r in results) == [pb.OK, pb.DIGEST_MISMATCH]
    (after,) = {r.incarnation for r in results}
    assert after not in (0, before)


async def test_explicit_lac_update_wakes_a_long_poll(stub: pb_grpc.BookieStub) -> None:
    ledger = 10
    adds = [make_add(ledger, e, payload(ledger, e), lac=e - 1) for e in range(3)]
    await send_frames(stub, [pb.AddFrame(batches=adds)])
    poll = asyncio.ensure_future(
        stub.Read(
            pb.ReadRequest(
                ledger_id=ledger,
                first_entry_id=2,
                last_entry_id=2,
                previous_lac=1,
                long_poll_timeout_ms=30_000,
            )
        )
    )
    lac = pb.LacUpdate(ledger_id=ledger, lac=2, master_key=master_key(b""))
    await send_frames(stub, [pb.AddFrame(lacs=[lac])])
    reply = await asyncio.wait_for(poll, timeout=20)
    assert (reply.status, reply.lac) == (pb.OK, 2)
    lac_reply = await stub.ReadLac(pb.ReadLacRequest(ledger_id=ledger))
    assert (lac_reply.lac, lac_reply.last_entry_id) == (2, 2)
    assert lac_reply.last_entry.data == payload(ledger, 2)
    unknown = await stub.ReadLac(pb.ReadLacRequest(ledger_id=999))
    assert unknown.status == pb.NO_SUCH_LEDGER


async def test_lac_watch_answers_each_new_lac_with_the_entries_it_confirms(
    stub: pb_grpc.BookieStub,
) -> None:
    ledger = 16
    call = stub.WatchLac(
        pb.WatchLacRequest(ledger_id=ledger, previous_lac=-1, max_entries=8, heartbeat_ms=60_000)
    )
    adds = [make_add(ledger, e, payload(ledger, e), lac=e - 1) for e in range(3)]
    await send_frames(stub, [pb.AddFrame(batches=adds)])
    lac = pb.LacUpdate(ledger_id=ledger, lac=2, master_key=master_key(b""))
    seen: list[int] = []
    last_lac = -1
    while last_lac < 1:
        reply = await asyncio.wait_for(call.read(), timeout=20)
        assert reply.status == pb.OK and reply.lac > last_lac
        # Only confirmed entries come along, each once, in order.
        assert all(e.entry_id <= reply.lac for e in reply.entries)
        seen += [e.entry_id for e in reply.entries]
        last_lac = reply.lac
    assert seen == [0, 1]
    await send_frames(stub, [pb.AddFrame(lacs=[lac])])
    reply = await asyncio.wait_for(call.read(), timeout=20)
    assert (reply.lac, [e.entry_id for e in reply.entries]) == (2, [2])
    assert reply.entries[0].data == payload(ledger, 2)
    call.cancel()


async def test_lac_watch_sends_the_current_lac_as_a_heartbeat_when_idle(
    stub: pb_grpc.BookieStub,
) -> None:
    ledger = 17
    await send_frames(stub, [pb.AddFrame(batches=[make_add(ledger, 0, b"a")])])
    call = stub.WatchLac(
        pb.WatchLacRequest(ledger_id=ledger, previous_lac=5, max_entries=8, heartbeat_ms=100)
    )
    for _ in range(2):
        reply = await asyncio.wait_for(call.read(), timeout=20)
        assert (reply.status, reply.lac, list(reply.entries)) == (pb.OK, -1, [])
    call.cancel()


async def test_lac_watch_with_a_min_interval_spaces_its_answers_and_misses_nothing(
    stub: pb_grpc.BookieStub,
) -> None:
    ledger = 18
    spacing = 0.3
    call = stub.WatchLac(
        pb.WatchLacRequest(
            ledger_id=ledger,
            previous_lac=-1,
            max_entries=100,
            heartbeat_ms=60_000,
            min_interval_ms=round(spacing * 1000),
        )
    )
    loop = asyncio.get_running_loop()
    seen: list[int] = []
    times: list[float] = []

    async def watch() -> None:
        while not seen or seen[-1] < 29:
            reply = await asyncio.wait_for(call.read(), timeout=20)
            times.append(loop.time())
            seen.extend(e.entry_id for e in reply.entries)

    watching = asyncio.ensure_future(watch())
    started = loop.time()
    # 31 entries, one every ~30 ms: each confirms the one before it (LAC 0..29).
    for e in range(31):
        add = make_add(ledger, e, payload(ledger, e), lac=e - 1)
        await send_frames(stub, [pb.AddFrame(batches=[add])])
        await asyncio.sleep(0.03)
    await asyncio.wait_for(watching, 20)
    assert seen == list(range(30))  # every confirmed entry, once, in order
    # The adds took about a second: without the spacing that is ~30 answers.
    assert len(times) <= (times[-1] - started) / spacing + 2
    assert all(b - a >= spacing / 2 for a, b in itertools.pairwise(times[1:]))  # load jitter
    call.cancel()


@pytest.mark.parametrize(
    "request_",
    [
        pb.WatchLacRequest(ledger_id=-1, heartbeat_ms=1000),
        pb.WatchLacRequest(ledger_id=1, heartbeat_ms=0),
        pb.WatchLacRequest(ledger_id=1, heartbeat_ms=1000, max_entries=-1),
        pb.WatchLacRequest(ledger_id=1, heartbeat_ms=1000, min_interval_ms=-1),
    ],
)
async def test_lac_watch_refuses_a_malformed_request(
    stub: pb_grpc.BookieStub, request_: pb.WatchLacRequest
) -> None:
    replies = [r async for r in stub.WatchLac(request_)]
    assert [r.status for r in replies] == [pb.BAD_REQUEST]

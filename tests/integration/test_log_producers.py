"""Producer sessions against real bookies and a real metadata store: a (producer, seq) the
log holds is never written again, and a retry gets the record's first position, within a
writer, across rolls and after a takeover, also when the first writer's process was
SIGKILLed right after the bookies acknowledged the record (docs/logs.md, "Producer
sessions")."""

from __future__ import annotations

import asyncio
import textwrap
from collections import Counter
from collections.abc import AsyncIterator

import pytest

import walog
import walog.aio
from tests.integration.test_cli import _run
from tests.processes import python_child
from walog.aio import AsyncClient
from walog.errors import SequenceError, SequenceTooOldError, WriterFencedError
from walog.log.position import Position, Record
from walog.log.producers import WINDOW
from walog.testing import LocalCluster


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


async def records_of(client: AsyncClient, name: str) -> list[Record]:
    """Every record of the log, through a tailing reader."""
    log = await client.open_log(name)
    reader = await log.open_reader("earliest")
    out: list[Record] = []
    try:
        while (batch := await reader.read_available(timeout=0.5)) or not out:
            out += batch
            if not batch:
                break
    finally:
        await reader.close()
    return out


def assert_each_seq_once(records: list[Record]) -> None:
    tagged = Counter((r.producer, r.seq) for r in records if r.producer is not None)
    assert [pair for pair, n in tagged.items() if n > 1] == []


async def test_a_retried_append_returns_its_first_position_within_a_writer_and_after_a_roll(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    async with await log.open_writer(producer="svc-7") as writer:
        first = [await writer.append(b"r%d" % seq, seq=seq) for seq in range(3)]
        assert await writer.append(b"r1 again", seq=1) == first[1]
        await writer.roll()
        assert await writer.append(b"r2 again", seq=2) == first[2]
        assert await writer.append(b"r3") == Position(writer.ledger_id, 0, 0)  # seq 3
    records = await records_of(client, log_name)
    assert [(r.data, r.producer, r.seq) for r in records] == [
        (b"r0", "svc-7", 0),
        (b"r1", "svc-7", 1),
        (b"r2", "svc-7", 2),
        (b"r3", "svc-7", 3),
    ]


async def test_two_appends_of_one_seq_in_flight_write_it_once(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    async with await log.open_writer(producer="svc-7") as writer:
        one = writer.append_nowait(b"x", seq=4)
        two = writer.append_nowait(b"x", seq=4)
        assert await one == await two
    assert [(r.producer, r.seq) for r in await records_of(client, log_name)] == [("svc-7", 4)]


async def test_a_new_writer_of_the_producer_returns_the_first_position_after_a_takeover(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    old = await log.open_writer(producer="svc-7")
    first = [await old.append(b"r%d" % seq, seq=seq) for seq in range(4)]
    await old.roll()  # the table rides the roll's CAS; seq 3 is after the position it covers
    last = await old.append(b"r4", seq=4)
    new = await log.open_writer(producer="svc-7")  # fences the old writer
    with pytest.raises(WriterFencedError):
        await old.append(b"r5", seq=5)
    assert await new.append(b"again", seq=1) == first[1]
    assert await new.append(b"again", seq=4) == last
    assert await new.append(b"r5") != last  # numbered 5: the last seq is known
    await new.close()
    await old.close()
    records = await records_of(client, log_name)
    assert [r.seq for r in records] == [0, 1, 2, 3, 4, 5]
    assert_each_seq_once(records)


async def test_a_seq_older_than_the_window_is_refused_and_the_writer_goes_on(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    async with await log.open_writer(producer="svc-7") as writer:
        for seq in range(WINDOW + 2):
            writer.append_nowait(b"r", seq=seq)
        await writer.flush()
        with pytest.raises(SequenceTooOldError, match="seq 1 is older"):
            writer.append_nowait(b"r", seq=1)
        assert await writer.append(b"r", seq=2) is not None  # in the window: its position
        await writer.append(b"r", seq=WINDOW + 2)
    assert len(await records_of(client, log_name)) == WINDOW + 3


async def test_bad_seqs_are_refused_one_by_one_and_the_writer_goes_on(
    client: AsyncClient, log_name: str
) -> None:
    log = await client.open_log(log_name)
    async with await log.open_writer() as plain:
        with pytest.raises(SequenceError, match="no producer"):
            plain.append_nowait(b"x", seq=1)
        await plain.append(b"plain")
    async with await log.open_writer(producer="svc-7") as writer:
        with pytest.raises(ValueError, match=">= 0"):
            writer.append_nowait(b"x", seq=-1)
        with pytest.raises(TypeError, match="seq must be an int"):
            writer.append_nowait(b"x", seq="3")  # type: ignore[arg-type]
        await writer.append(b"x", seq=5)
        await writer.append(b"x", seq=9)  # a gap is accepted
        with pytest.raises(SequenceError, match="seq 7 was skipped"):
            writer.append_nowait(b"x", seq=7)
        await writer.append(b"y", seq=10)
    with pytest.raises(ValueError, match="empty"):
        await log.open_writer(producer="")
    assert [r.seq for r in await records_of(client, log_name)] == [None, 5, 9, 10]


def test_the_sync_writer_takes_seqs_one_by_one_and_in_batches(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        with log.open_writer(producer="svc-7") as writer:
            assert writer.producer == "svc-7"
            one = writer.append(b"a", seq=1)
            batch = writer.append_many([b"a", b"b", b"c"], seqs=[1, 2, None])
            assert batch[0] == one and len(set(batch)) == 3
            writer.append(b"d", seq=5)
            with pytest.raises(SequenceError, match="seq 4 was skipped"):
                writer.append(b"x", seq=4)
        with log.open_writer(producer="svc-7") as again:
            assert again.append(b"b", seq=2) == batch[1]
        with log.open_writer() as plain, pytest.raises(SequenceError, match="no producer"):
            plain.append(b"x", seq=4)


_KILLED_AFTER_ACK = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import walog.aio

    async def main(uri, name, start):
        async with await walog.aio.connect(uri) as client:
            log = await client.open_log(name)
            writer = await log.open_writer(producer="svc-7")
            start = int(start)
            for seq in range(start, start + 4):
                print(await writer.append(b"r%d" % seq, seq=seq), flush=True)
            await writer.roll()
            writer.append_nowait(b"r%d" % (start + 4), seq=start + 4)
            # The bookies acknowledged it; the caller never hears so.
            await writer.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main(*sys.argv[1:4]))
    """
)


async def run_killed_writer(cluster: LocalCluster, name: str, start: int) -> list[Position]:
    """A writer process of producer svc-7 that appends seqs ``start..start+4`` and is
    SIGKILLed once the last is acknowledged, before its caller hears; the positions it
    printed (all but the last)."""
    proc = await python_child(_KILLED_AFTER_ACK, cluster.metadata_uri, name, str(start))
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == -9, out
    return [Position.parse(line) for line in out.decode().split()]


async def test_a_writer_sigkilled_after_the_ack_leaves_a_retry_the_first_position(
    cluster: LocalCluster, client: AsyncClient, log_name: str
) -> None:
    printed = await run_killed_writer(cluster, log_name, 0)
    log = await client.open_log(log_name)
    async with await log.open_writer(producer="svc-7") as writer:
        # The in-doubt append, retried through the new writer: found, not written again.
        retried = await writer.append(b"r4", seq=4)
        assert await writer.append(b"r1", seq=1) == printed[1]
    records = await records_of(client, log_name)
    assert [r.seq for r in records] == [0, 1, 2, 3, 4]
    assert records[-1].position == retried
    assert [r.position for r in records[:4]] == printed


async def test_every_reader_reads_format_2_entries(
    cluster: LocalCluster,
    client: AsyncClient,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = await client.open_log(log_name)
    async with await log.open_writer(producer="svc-7") as writer:
        positions = [await writer.append(b"r%d" % seq, seq=seq) for seq in range(3)]
        stamp = (await records_of(client, log_name))[1].timestamp
        assert await log.position_at(stamp) == positions[1]  # time search
        barrier = await log.read_barrier()  # reads the last entry's records
        assert barrier > positions[-1]
    records = await records_of(client, log_name)
    assert [(r.data, r.producer, r.seq) for r in records] == [
        (b"r0", "svc-7", 0),
        (b"r1", "svc-7", 1),
        (b"r2", "svc-7", 2),
    ]
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    status, out, err = await asyncio.to_thread(_run, ["tail", log_name, "-n", "2"], capsys)
    assert status == 0, err
    assert [line.split("\t")[1] for line in out.splitlines()] == ["r1", "r2"]

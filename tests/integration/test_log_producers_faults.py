"""Producer sessions under faults: writer processes SIGKILLed between the bookies'
acknowledgement of a record and its caller's, bookies killed while they write, a takeover
at every turn, and a client that retries every append left in doubt with the same
(producer, seq) through the next writer. Afterwards every (producer, seq) is in the log
exactly once, and every retry got the position of the record's first write.

The default run has 3 rounds (6 takeovers); ``--slow`` runs 12."""

from __future__ import annotations

import asyncio
import random
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import walog.aio
from tests.processes import python_child
from walog.log.position import Position, Record
from walog.log.retention import RollPolicy
from walog.testing import LocalCluster

PRODUCER = "svc-7"
PER_ROUND = 12

_WRITER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import walog.aio
    from walog.log.retention import RollPolicy
    from walog.log.writer import LogWriterConfig

    async def main(uri, name, start, count, kill_at):
        start, count, kill_at = int(start), int(count), int(kill_at)
        async with await walog.aio.connect(uri) as client:
            log = await client.open_log(name, roll_policy=RollPolicy(max_entries=3))
            config = LogWriterConfig(max_records_per_entry=2)
            writer = await log.open_writer(config, producer="svc-7")
            print("open", flush=True)
            futures = [
                writer.append_nowait(b"r%d" % seq, seq=seq) for seq in range(start, start + count)
            ]
            for i, future in enumerate(futures):
                position = await future
                if i == kill_at:  # acknowledged by the bookies; the caller never hears
                    os.kill(os.getpid(), signal.SIGKILL)
                print(start + i, position, flush=True)

    asyncio.run(main(*sys.argv[1:6]))
    """
)


async def writer_round(
    cluster: LocalCluster, name: str, start: int, kill_at: int, victim: int
) -> dict[int, Position]:
    """A writer process appends seqs ``start..start+PER_ROUND-1`` pipelined and is SIGKILLed
    right after the ack of the ``kill_at``-th; bookie ``victim`` is killed once the writer
    took over. Returns the positions its caller heard of."""
    proc = await python_child(
        _WRITER, cluster.metadata_uri, name, str(start), str(PER_ROUND), str(kill_at)
    )
    assert proc.stdout is not None
    try:
        assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"open\n"
        await asyncio.to_thread(cluster.kill, victim)
        out = await asyncio.wait_for(proc.stdout.read(), 120)
        assert await proc.wait() == -9, out
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    heard = {}
    for line in out.decode().splitlines():
        seq, position = line.split()
        heard[int(seq)] = Position.parse(position)
    return heard


async def all_records(client: walog.aio.AsyncClient, name: str) -> list[Record]:
    log = await client.open_log(name)
    reader = await log.open_reader("earliest")
    out: list[Record] = []
    try:
        while batch := await reader.read_available(timeout=1.0):
            out += batch
    finally:
        await reader.close()
    return out


async def fault_run(cluster: LocalCluster, name: str, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    first: dict[int, Position] = {}  # seq -> the position its caller heard first
    retried: dict[int, Position] = {}
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        for turn in range(rounds):
            start = turn * PER_ROUND
            victim = turn % 4
            heard = await writer_round(cluster, name, start, rng.randrange(PER_ROUND), victim)
            first.update(heard)
            await asyncio.to_thread(cluster.restart, victim)
            log = await client.open_log(name, roll_policy=RollPolicy(max_entries=3))
            # The client retries every append left in doubt through a new writer.
            async with await log.open_writer(producer=PRODUCER) as writer:
                for seq in range(start, start + PER_ROUND):
                    if seq not in heard:
                        retried[seq] = await writer.append(b"r%d" % seq, seq=seq)
        records = await all_records(client, name)
    where = f"(seed {seed})"
    counts = Counter((r.producer, r.seq) for r in records)
    assert [pair for pair, n in counts.items() if n != 1] == [], where
    at = {r.seq: r.position for r in records if r.producer == PRODUCER and r.seq is not None}
    assert sorted(at) == list(range(rounds * PER_ROUND)), where
    assert {seq: at[seq] for seq in first} == first, where
    assert {seq: at[seq] for seq in retried} == retried, where
    assert [r.data for r in records] == [b"r%d" % seq for seq in sorted(at)], where


@pytest.fixture
def four_bookies(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(bookies=4, metadata="sqlite", data_dir=tmp_path / "cluster") as local:
        yield local


async def test_every_seq_is_in_the_log_once_through_kills_and_takeovers(
    four_bookies: LocalCluster, log_name: str
) -> None:
    await fault_run(four_bookies, log_name, rounds=3, seed=7)


@pytest.mark.slow
async def test_every_seq_is_in_the_log_once_through_many_kills_and_takeovers(
    four_bookies: LocalCluster, log_name: str
) -> None:
    await fault_run(four_bookies, log_name, rounds=12, seed=11)

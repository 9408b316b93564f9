"""Named subscriptions against real bookies: a reader opened for a subscription resumes
after what it committed, retention keeps what a subscription has not read, and the
retention policy's backlog limits let retention pass a subscription, saying so."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import pytest

import walog
import walog.aio
from walog.aio import AsyncClient
from walog.log import truncation
from walog.log.position import Position
from walog.log.retention import RetentionPolicy
from walog.metrics.client import ClientMetrics
from walog.testing import LocalCluster


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


async def _write_ledgers(client: AsyncClient, name: str, ledgers: int, per: int) -> list[Position]:
    """``ledgers`` closed ledgers of ``per`` records each (records r0, r1, ...), then one
    open one holding one more record; the positions of every record."""
    log = await client.open_log(name)
    positions = []
    async with await log.open_writer() as writer:
        for i in range(ledgers * per):
            positions.append(await writer.append(b"r%d" % i))
            if (i + 1) % per == 0:
                await writer.roll()
        positions.append(await writer.append(b"r%d" % (ledgers * per)))
    return positions


async def test_a_subscription_reader_resumes_after_its_committed_position(
    client: AsyncClient, log_name: str
) -> None:
    await _write_ledgers(client, log_name, 2, 3)
    log = await client.open_log(log_name)
    async with await log.open_reader(subscription="billing") as reader:
        got = [(await reader.read_next(timeout=30)) for _ in range(4)]
        committed = await reader.commit()
    assert [r.data for r in got if r is not None] == [b"r0", b"r1", b"r2", b"r3"]
    assert committed is not None and committed > got[-1].position  # type: ignore[union-attr]
    async with await log.open_reader("latest", subscription="billing") as reader:
        record = await reader.read_next(timeout=30)
    assert record is not None and record.data == b"r4"  # after r3, whatever `start` says


async def test_a_subscription_never_committed_starts_where_the_caller_says(
    client: AsyncClient, log_name: str
) -> None:
    positions = await _write_ledgers(client, log_name, 1, 3)
    log = await client.open_log(log_name)
    async with await log.open_reader(subscription="fresh") as reader:
        first = await reader.read_next(timeout=30)
    assert first is not None and first.data == b"r0"
    async with await log.open_reader(positions[2], subscription="fresh") as reader:
        first = await reader.read_next(timeout=30)
    assert first is not None and first.data == b"r2"
    assert "fresh" not in (await log.metadata()).cursors  # reading alone commits nothing


def test_a_sync_subscription_reader_commits_what_it_returned(
    cluster: LocalCluster, log_name: str
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        with log.open_writer() as writer:
            writer.append_many([b"a", b"b", b"c", b"d"])
        with log.open_reader(subscription="s") as reader:
            assert [reader.read_next(timeout=30).data for _ in range(2)] == [b"a", b"b"]  # type: ignore[union-attr]
            # The reader fetched all four at once; only the two returned are consumed.
            reader.commit()
        with log.open_reader(subscription="s") as reader:
            record = reader.read_next(timeout=30)
            assert record is not None and record.data == b"c"
            reader.commit(record.position)  # an explicit position: c is read again
        with log.open_reader(subscription="s") as reader:
            record = reader.read_next(timeout=30)
            assert record is not None and record.data == b"c"
        assert [s.name for s in log.subscriptions()] == ["s"]


async def test_a_reader_commits_only_for_a_subscription_and_only_positions(
    client: AsyncClient, log_name: str
) -> None:
    await _write_ledgers(client, log_name, 1, 1)
    log = await client.open_log(log_name)
    async with await log.open_reader() as reader:
        with pytest.raises(ValueError, match="subscription"):
            await reader.commit()
    async with await log.open_reader(subscription="s") as reader:
        with pytest.raises(TypeError, match="position"):
            await reader.commit(42)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="position"):
            await reader.commit("garbage")
    with pytest.raises(ValueError, match="subscription name is empty"):
        await log.open_reader(subscription="")
    assert (await log.metadata()).cursors == {}
    await log.open_reader()  # the record still reads


async def test_retention_keeps_every_ledger_a_subscription_has_not_read(
    client: AsyncClient, log_name: str
) -> None:
    positions = await _write_ledgers(client, log_name, 3, 2)
    log = await client.open_log(log_name)
    async with await log.open_reader(subscription="slow") as reader:
        await reader.read_next(timeout=30)
        await reader.commit()  # inside the first ledger
    policy = RetentionPolicy(max_age=1)
    later = time.time() + 3600
    assert await truncation.enforce_retention(client, log_name, policy, now=later) == 0
    await log.commit_cursor("slow", positions[4])  # past the first two ledgers
    assert await truncation.enforce_retention(client, log_name, policy, now=later) == 2


async def test_retention_past_the_backlog_limit_deletes_past_the_slowest_subscription_and_says_so(
    cluster: LocalCluster, log_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = ClientMetrics()
    async with await walog.aio.connect(cluster.metadata_uri, metrics=metrics) as client:
        await _write_ledgers(client, log_name, 3, 2)
        log = await client.open_log(log_name)
        async with await log.open_reader(subscription="slow") as reader:
            await reader.commit()  # at the very start: holds every ledger
        meta = await log.metadata()
        sizes = [info.size_bytes or 0 for info in meta.ledgers if info.is_closed]
        assert len(sizes) == 4 and all(sizes), sizes
        # Within the limit: nothing goes. Over it: ledgers go until the backlog fits.
        within = RetentionPolicy(max_age=1, backlog_limit_bytes=sum(sizes))
        later = time.time() + 3600
        assert await truncation.enforce_retention(client, log_name, within, now=later) == 0
        over = RetentionPolicy(max_age=1, backlog_limit_bytes=sizes[-2] + sizes[-1])
        with caplog.at_level(logging.WARNING, logger="walog"):
            assert await truncation.enforce_retention(client, log_name, over, now=later) == 2
        lines = [r.getMessage() for r in caplog.records if "subscription" in r.getMessage()]
        assert len(lines) == 1 and "'slow'" in lines[0] and log_name in lines[0], lines
        assert metrics.backlog_overruns[(log_name, "slow")] == 1
        counters = {m.name: m for m in metrics.collect()}
        sample = counters["walog_client_backlog_overruns"].samples[0]
        assert sample.labels == {"log": log_name, "subscription": "slow"} and sample.value == 1
        # The subscription resumes where the log now starts, with the third ledger.
        meta = await log.metadata()
        assert meta.cursors["slow"] == meta.truncated_through
        async with await log.open_reader(subscription="slow") as reader:
            record = await reader.read_next(timeout=30)
        assert record is not None and record.data == b"r4"

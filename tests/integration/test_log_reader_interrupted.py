"""A tailing reader interrupted while it re-reads the ledger list loses no change of it.

A change of the log's metadata (a takeover, a roll) reaches the reader once, as a watch
notification; the reader then re-reads the list on its next step. A step that does not get
to the end of that re-read (its caller cancelled it) must leave the change to be looked at
again, or the reader keeps the old list and never finds the ledger the new writer writes.
A metadata hiccup during the re-read is retried like any retriable failure of a reader.
And a reader closed while a read waits for records ends that read (a thread iterating a
sync reader is not left blocked for good by another thread's close()).

Over real bookies and the cluster's real metadata store; the reader's re-read of the list
passes through a gate that holds the read once it returned the list the change made.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import walog.aio
from walog.aio import AsyncClient
from walog.errors import MetadataError
from walog.ledger.options import LedgerOptions
from walog.log.reader import AsyncLogReader, open_log_reader
from walog.log.retention import RollPolicy
from walog.log.writer import LogWriterConfig, open_log_writer
from walog.testing import LocalCluster


class GatedStore:
    """The real metadata store, except that one read can be held after it returned."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.hold: Callable[[bytes], bool] | None = None  # which read to hold (once)
        self.fail: Callable[[bytes], bool] | None = None  # which read fails (once)
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def get(self, path: str) -> tuple[bytes, int]:
        raw, version = await self._inner.get(path)
        if self.fail is not None and self.fail(raw):
            self.fail = None
            raise MetadataError("connection to the metadata store lost")
        if self.hold is not None and self.hold(raw):
            self.hold = None
            self.held.set()
            await self.release.wait()
        return raw, version

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GatedContext:
    """The client's context with a :class:`GatedStore` for its metadata store."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.store = GatedStore(inner.store)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GatedStoreClient:
    """The real client, whose metadata reads of the log layer go through a gate."""

    def __init__(self, inner: AsyncClient) -> None:
        self._inner = inner
        self.ctx = GatedContext(inner.ctx)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    async with await walog.aio.connect(cluster.metadata_uri) as c:
        yield c


def epoch_of(raw: bytes) -> int:
    epoch: int = json.loads(raw)["epoch"]
    return epoch


async def writer_of(client: AsyncClient, name: str) -> Any:
    """Take the log over (without the orphan scan that changes the list once more)."""
    return await open_log_writer(client, name, LedgerOptions(), RollPolicy(), LogWriterConfig())


async def tailing_reader(client: AsyncClient, name: str) -> tuple[AsyncLogReader, GatedStore]:
    """A reader (through a gated store) that has read the first writer's record and tails."""
    gated = GatedStoreClient(client)
    reader = await open_log_reader(gated, name, "earliest")  # type: ignore[arg-type]
    record = await reader.read_next(timeout=30)
    assert record is not None and record.data == b"a0"
    assert await reader.read_next(timeout=0.3) is None  # tailing the first writer's ledger
    return reader, gated.ctx.store


async def test_a_read_cancelled_while_it_rereads_the_list_still_follows_a_takeover(
    client: AsyncClient, log_name: str
) -> None:
    await client.open_log(log_name)
    first = await writer_of(client, log_name)
    await first.append(b"a0")
    reader, store = await tailing_reader(client, log_name)
    store.hold = lambda raw: epoch_of(raw) == 2  # the list the takeover wrote
    waiting = asyncio.create_task(reader.read_next())
    second = await writer_of(client, log_name)  # one change of the list: fence, add, CAS
    await asyncio.wait_for(store.held.wait(), 30)
    waiting.cancel()  # e.g. asyncio.timeout() around read_next
    with pytest.raises(asyncio.CancelledError):
        await waiting
    store.release.set()
    await second.append(b"b0")
    record = await reader.read_next(timeout=10)
    assert record is not None, "the reader lost the takeover and tails the fenced ledger"
    assert record.data == b"b0"
    await reader.close()
    await second.close()
    await first.close()


async def test_a_metadata_hiccup_while_rereading_the_list_is_retried(
    client: AsyncClient, log_name: str
) -> None:
    await client.open_log(log_name)
    first = await writer_of(client, log_name)
    await first.append(b"a0")
    reader, store = await tailing_reader(client, log_name)
    store.fail = lambda raw: epoch_of(raw) == 2  # the first read of the takeover's list
    waiting = asyncio.create_task(reader.read_next(timeout=30))
    second = await writer_of(client, log_name)
    await second.append(b"b0")
    record = await waiting  # retried, as the reader's other retriable failures are
    assert record is not None and record.data == b"b0"
    assert store.fail is None, "the hiccup was never met"
    await reader.close()
    await second.close()
    await first.close()


@pytest.mark.parametrize("tailing", [True, False], ids=["open-ledger", "empty-log"])
async def test_closing_a_reader_ends_the_read_waiting_on_it(
    client: AsyncClient, log_name: str, tailing: bool
) -> None:
    await client.open_log(log_name)
    writer = await writer_of(client, log_name) if tailing else None
    reader = await open_log_reader(client, log_name, "earliest")
    assert await reader.read_next(timeout=0.3) is None  # waits: for records, for a ledger
    waiting = asyncio.create_task(reader.read_next())
    await asyncio.sleep(0)  # the read is waiting
    await reader.close()
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.wait_for(waiting, 5)
    if writer is not None:
        await writer.close()

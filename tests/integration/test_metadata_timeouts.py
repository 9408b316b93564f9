"""``Timeouts.metadata`` bounds every metadata call of a client, retries included.

A call the store does not complete in time fails with the retriable MetadataError; for a
change its outcome is unknown (it may still apply), and the error says so. The connection
itself is bounded by ``connect(timeout=...)``, kept long here so that only
``Timeouts.metadata`` can end the calls.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path

import pytest

import walog.aio
from walog.config import ClientConfig, Timeouts
from walog.errors import MetadataError, is_retriable
from walog.metadata import open_store
from walog.metadata.zookeeper import ZooKeeperStore
from walog.testing import ZooKeeperServer

CALL_S = 1.0
"""``Timeouts.metadata`` of the clients below."""
CONNECT_S = 30.0
"""Their connection timeout, and the ZooKeeper session's: far above ``CALL_S``."""
UNKNOWN = "may or may not have been applied"
CONFIG = ClientConfig(timeouts=Timeouts(metadata=CALL_S))


async def _timed(call: Awaitable[object]) -> tuple[MetadataError, float]:
    started = time.monotonic()
    with pytest.raises(MetadataError) as caught:
        await call
    return caught.value, time.monotonic() - started


@pytest.mark.zk
async def test_a_metadata_call_ends_within_timeouts_metadata_while_zookeeper_is_paused(
    zookeeper: ZooKeeperServer,
) -> None:
    uri = zookeeper.uri(f"/call-timeout-{uuid.uuid4().hex[:12]}", session_timeout=CONNECT_S)
    async with await walog.aio.connect(uri, timeout=CONNECT_S, config=CONFIG) as client:
        assert await client.list_ledgers() == []
        zookeeper.pause()
        try:
            read, read_s = await _timed(client.list_ledgers())
            change, change_s = await _timed(client.delete_ledger(7))
        finally:
            zookeeper.resume()
        # Ended by Timeouts.metadata, not by the connection's or the session's limits.
        assert CALL_S <= read_s < CONNECT_S / 3, read_s
        assert CALL_S <= change_s < CONNECT_S / 3, change_s
        assert is_retriable(read) and is_retriable(change)
        assert "within 1s" in str(read) and UNKNOWN not in str(read)
        assert "delete" in str(change) and UNKNOWN in str(change)
        assert await client.list_ledgers() == []  # the same client goes on once it answers


async def test_a_metadata_change_that_times_out_reports_an_unknown_outcome_on_sqlite(
    tmp_path: Path,
) -> None:
    path = tmp_path / "meta.db"
    async with await walog.aio.connect(
        f"sqlite://{path}", timeout=CONNECT_S, config=CONFIG
    ) as client:
        assert await client.list_ledgers() == []
        other_writer = sqlite3.connect(path, isolation_level=None)
        other_writer.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            change, change_s = await _timed(client.delete_ledger(7))
        finally:
            other_writer.execute("ROLLBACK")
            other_writer.close()
        assert CALL_S <= change_s < CONNECT_S / 3, change_s
        assert is_retriable(change)
        assert "delete /ledgers/" in str(change) and UNKNOWN in str(change)
        assert await client.list_ledgers() == []


@pytest.mark.zk
async def test_a_metadata_call_retried_while_its_store_closes_fails_with_a_closed_store_error(
    zk_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(zk_uri)
    assert isinstance(store, ZooKeeperStore)
    lost = asyncio.Event()

    def connection_lost(fn: object, path: str) -> object:
        lost.set()
        raise MetadataError(f"ZooKeeper lost its connection on {path}")  # retriable

    monkeypatch.setattr(store, "_call", connection_lost)
    call = asyncio.ensure_future(store.get("/anything"))
    await lost.wait()  # the call now waits to retry
    await store.close()
    with pytest.raises(MetadataError, match="is closed") as caught:
        await call
    assert not is_retriable(caught.value)

"""A log writer whose ZooKeeper session expires stops with SessionExpiredError: it cannot
know whether another writer took the log over meanwhile. Nothing it acknowledged is lost."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

import walog.aio
from walog.errors import SessionExpiredError
from walog.log.position import Position
from walog.testing import LocalCluster, ZooKeeperServer


async def test_a_log_writer_without_zookeeper_for_a_session_timeout_stops_clearly(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/expiry-{uuid.uuid4().hex[:12]}"
    # Bookies keep long sessions (they outlive the pause); the writer's is 1.5 s.
    bookies_uri = zookeeper.uri(chroot, session_timeout=15)
    with LocalCluster(bookies=3, metadata=bookies_uri, data_dir=tmp_path / "cluster"):
        async with await walog.aio.connect(zookeeper.uri(chroot, session_timeout=1.5)) as client:
            log = await client.open_log("expiring")
            writer = await log.open_writer()
            acked: list[Position] = [await writer.append(b"before the pause")]
            zookeeper.pause()
            paused_at = time.monotonic()
            try:
                with pytest.raises(SessionExpiredError, match="another writer may have taken"):
                    while time.monotonic() - paused_at < 20:
                        # Appends need no ZooKeeper: they go on until the session is
                        # presumed expired.
                        acked.append(await writer.append(b"during the pause"))
                        await asyncio.sleep(0.02)
                stopped_after = time.monotonic() - paused_at
            finally:
                zookeeper.resume()
            assert 1.5 <= stopped_after < 10, stopped_after
            with pytest.raises(SessionExpiredError):
                await writer.append(b"after")
        async with await walog.aio.connect(bookies_uri) as client:
            log = await client.open_log("expiring")
            successor = await log.open_writer()  # takes over, recovering what is there
            await successor.close()
            reader = await log.open_reader("earliest")
            found = []
            while (record := await reader.read_next(timeout=2.0)) is not None:
                found.append(record.position)
            await reader.close()
    assert set(acked) <= set(found)

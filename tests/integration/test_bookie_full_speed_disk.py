"""A bookie written to at full speed on a disk that fills, with a real bookie on a small real
file system (tmpfs) and a log writer whose retention deletes old ledgers.

The rule (bookie/disks.py, *measured in good time*): a bookie measures its disks again once
it has journaled a share of the room left below the read-only mark, so however fast it is
written to, it turns read-only while the reserve above the mark still holds what it has
taken: neither its journal nor a checkpoint meets a full disk. Once retention deleted the
ledgers it holds and the GC collected them, it takes adds again, its journal intact.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from pathlib import Path

import pytest

import walog
import walog.aio
from tests.integration.bookies import make_add, running_bookie
from tests.integration.disks import add_status, bookie_metric, small_tmpfs, used_share
from walog.log.writer import LogWriterConfig
from walog.testing import BookieProcess, LocalCluster, free_port
from walog.wire.proto import bookie_pb2 as pb

DISK_MIB = 256
"""The small bookie's disk (data and journal): its reserve above the read-only mark (5 %,
12.8 MiB) is written in well under a second at full speed."""
RECORD = b"r" * 1024
IN_FLIGHT = 8192
"""Records appended and not yet acknowledged, at most (8 MiB)."""
ROLL = walog.RollPolicy(max_bytes=8 * 1024 * 1024)
RETENTION = walog.RetentionPolicy(max_bytes=16 * 1024 * 1024)
WITHIN_S = 120.0
"""How long the small bookie may take to turn read-only, and then writable again."""


def _storage_failures(bookie: BookieProcess) -> list[str]:
    return [
        line
        for line in bookie.log().splitlines()
        if '"journal failed"' in line or '"checkpoint failed"' in line
    ]


async def _write_until_full_and_writable_again(
    uri: str, small: BookieProcess, metrics_port: int
) -> tuple[int, float, float]:
    """Append at full speed until the small bookie turned read-only and then writable again;
    the records acknowledged and the seconds each phase took."""
    client = await walog.aio.connect(uri)
    try:
        config = walog.LogConfig(roll=ROLL, retention=RETENTION)
        log = await client.create_log(f"full-speed-{uuid.uuid4().hex[:8]}", config)
        writer = await log.open_writer(LogWriterConfig())
        inflight: collections.deque[asyncio.Future[walog.Position]] = collections.deque()
        done = 0
        started = time.monotonic()
        read_only_at = 0.0
        checked = started
        try:
            while True:
                while len(inflight) < IN_FLIGHT:
                    inflight.append(writer.append_nowait(RECORD))
                await inflight.popleft()
                done += 1
                now = time.monotonic()
                if now - checked < 0.2:
                    continue
                checked = now
                assert small.running, "the small bookie died"
                assert not _storage_failures(small), _storage_failures(small)
                if not read_only_at:
                    if bookie_metric(metrics_port, "walog_bookie_read_only_entered_total") >= 1:
                        read_only_at = now
                    assert now - started < WITHIN_S, "the small bookie never turned read-only"
                    continue
                if small.bookie_id in await client.bookies():
                    break
                assert now - read_only_at < WITHIN_S, "the small bookie stayed read-only"
            while inflight:
                await inflight.popleft()
                done += 1
        finally:
            for future in inflight:
                future.cancel()
            await writer.close()
        return done, read_only_at - started, time.monotonic() - read_only_at
    finally:
        await client.close()


@pytest.mark.timeout(300)
def test_a_bookie_written_at_full_speed_turns_read_only_before_its_disk_is_full(
    tmp_path: Path,
) -> None:
    metrics_port = free_port()
    with (
        small_tmpfs(DISK_MIB) as disk,
        LocalCluster(bookies=3, data_dir=tmp_path / "cluster") as cluster,
        running_bookie(
            disk / "bookie",
            cluster.metadata_uri,
            # Every setting at its default but the metrics port and a short GC margin (the
            # deletions are proven by a synced metadata read; the margin only slows the test).
            extra_args=["--metrics-port", str(metrics_port), "--gc-grace-s", "1"],
        ) as small,
    ):
        done, filled_s, back_s = asyncio.run(
            _write_until_full_and_writable_again(cluster.metadata_uri, small, metrics_port)
        )
        print(
            f"\n{done} records of 1 KiB; read-only after {filled_s:.1f} s, writable again "
            f"{back_s:.1f} s later (disk {used_share(disk):.1%} used)"
        )
        assert not _storage_failures(small)
        assert bookie_metric(metrics_port, "walog_bookie_read_only") == 0
        # The journal still takes writes, and the bookie restarts on what it wrote.
        assert add_status(small, make_add(777_777, 0, b"y")) == pb.OK
        small.terminate()
        small.start().wait_ready()
        assert add_status(small, make_add(777_778, 0, b"z")) == pb.OK
        assert not _storage_failures(small)

"""A live log writer is visible: it registers itself (an ephemeral node in ZooKeeper, a
lease row in SQLite) with host, pid, epoch and start time, and the registration goes when
the writer closes, is fenced, or its process dies. Against both metadata stores."""

from __future__ import annotations

import os
import signal
import socket
import textwrap
import time

import pytest

import walog.aio
from tests.integration.waiting import eventually
from tests.processes import python_child
from walog.errors import WriterFencedError
from walog.metadata.layout import log_writers_path
from walog.testing import LocalCluster


async def test_a_live_writer_is_registered_with_host_pid_epoch_and_start_time(
    any_cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(any_cluster.metadata_uri) as client:
        log = await client.open_log(log_name)
        assert await log.writer() is None
        before = time.time()
        writer = await log.open_writer()
        after = time.time()
        shown = await log.writer()
        assert shown is not None
        assert (shown.host, shown.pid) == (socket.gethostname(), os.getpid())
        assert shown.epoch == writer.epoch == (await log.metadata()).epoch
        assert before <= shown.started_at <= after
        await writer.append(b"x")
        await writer.close()
        assert await log.writer() is None
        assert await client.ctx.store.children(log_writers_path(log_name)) == []


async def test_a_fenced_writer_is_no_longer_the_registered_writer(
    any_cluster: LocalCluster, log_name: str
) -> None:
    uri = any_cluster.metadata_uri
    async with await walog.aio.connect(uri) as one, await walog.aio.connect(uri) as two:
        first = await (await one.open_log(log_name)).open_writer()
        log = await two.open_log(log_name)
        second = await log.open_writer()
        shown = await log.writer()
        assert shown is not None and shown.epoch == second.epoch > first.epoch
        with pytest.raises(WriterFencedError):
            await first.append(b"late")
        store = two.ctx.store

        async def only_the_new_writer_registered() -> None:
            assert await store.children(log_writers_path(log_name)) == [str(second.epoch)]

        await eventually(only_the_new_writer_registered)
        await first.close()
        await second.close()


_WRITER = textwrap.dedent(
    """
    import sys, time, walog
    client = walog.connect(sys.argv[1])
    writer = client.open_log(sys.argv[2]).open_writer()
    writer.append(b"alive")
    print("ready", flush=True)
    time.sleep(3600)
    """
)


async def test_a_writer_whose_process_died_is_no_longer_shown(
    any_cluster: LocalCluster, log_name: str
) -> None:
    proc = await python_child(_WRITER, any_cluster.metadata_uri, log_name)
    try:
        assert proc.stdout is not None and await proc.stdout.readline() == b"ready\n"
        async with await walog.aio.connect(any_cluster.metadata_uri) as client:
            log = await client.open_log(log_name)
            shown = await log.writer()
            assert shown is not None and shown.pid == proc.pid
            proc.send_signal(signal.SIGKILL)
            await proc.wait()

            async def gone() -> None:
                assert await log.writer() is None

            # The session ends: ZooKeeper's timeout, or the SQLite lease's expiry.
            await eventually(gone, within=30)
            assert [s.state for s in await log.segments()] == ["OPEN"]  # nobody closed it
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

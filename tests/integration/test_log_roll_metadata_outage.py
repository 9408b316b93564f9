"""A VOLATILE log's roll while the metadata store is out of reach.

After a roll, records for the new ledger wait for the close of the ledger rolled away from:
the close forces it, and until then a crash could take its acknowledged records while later
ones survive. They wait for that close only, not for the update that then records the
ledger's end in the log's list: a metadata store out of reach holds that update up (the
next takeover makes it again if it never comes), and appends must not stall behind it.

A real ZooKeeper behind a proxy cuts the writer's connection right after that update's
``setData`` and refuses it for a while, over real bookie processes.
"""

from __future__ import annotations

import asyncio

import walog.aio as aio
from tests.integration.cutting_proxy import CuttingProxy, zk_set_data_request
from walog.log.async_log import AsyncLog
from walog.metadata.layout import log_path
from walog.metadata.uri import ZooKeeperURI, parse_uri
from walog.testing import LocalCluster
from walog.wire.durability import Durability

OUTAGE_S = 8.0
"""How long the proxy refuses the writer's connections once it cut one (well below the
session timeout, so the writer's session outlives the outage)."""


async def read_all(log: AsyncLog) -> list[bytes]:
    out = []
    async with await log.open_reader("earliest") as reader:
        while (record := await reader.read_next(timeout=1.0)) is not None:
            out.append(record.data)
    return out


async def test_held_records_wait_for_the_old_ledgers_close_not_for_the_metadata_update(
    zk_cluster: LocalCluster, log_name: str
) -> None:
    uri = parse_uri(zk_cluster.metadata_uri)
    assert isinstance(uri, ZooKeeperURI)
    host, port = uri.connect_string.split(",")[0].rsplit(":", 1)
    with CuttingProxy((host, int(port))) as proxy:
        via_proxy = f"zk://127.0.0.1:{proxy.port}{uri.chroot}?session_timeout=20"
        async with (
            await aio.connect(via_proxy, timeout=1.0) as client,
            await aio.connect(zk_cluster.metadata_uri) as direct,
        ):
            log = await client.open_log(log_name, durability=Durability.VOLATILE)
            writer = await log.open_writer()
            await writer.append(b"one")
            old = writer.ledger_id
            # The one setData of the log's list that marks a ledger CLOSED: the update
            # that records the old ledger's end, after the roll's switch and its close.
            proxy.lose_answer_to(
                zk_set_data_request(uri.chroot + log_path(log_name)), OUTAGE_S, b'"CLOSED"'
            )
            roll = asyncio.create_task(writer.roll())
            assert await asyncio.to_thread(proxy.cut.wait, 60.0), "the update was never sent"
            assert writer.ledger_id != old
            assert (await direct.ledger_metadata(old)).state == "CLOSED"

            later = writer.append_nowait(b"two")
            flushed = asyncio.create_task(writer.flush())
            done, _ = await asyncio.wait([flushed, roll], return_when=asyncio.FIRST_COMPLETED)
            assert flushed in done and not roll.done(), (
                "a record appended after the roll waited for the metadata update that "
                "records the old ledger's end, not only for the old ledger's close"
            )
            assert later.done() and later.result().ledger_id == writer.ledger_id

            await roll  # the update goes through once ZooKeeper is reachable again
            ledgers = (await log.metadata()).ledgers
            assert [(i.ledger_id, i.state) for i in ledgers] == [
                (old, "CLOSED"),
                (writer.ledger_id, "OPEN"),
            ]
            await writer.close()
            assert await read_all(await direct.open_log(log_name)) == [b"one", b"two"]

"""An entry damaged in transit is never served: the client checks every entry's digest,
tries the next copy, and raises DigestMismatchError when every copy it could read was
damaged (a real bookie behind a proxy that flips a bit of the answers, as a faulty link)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import walog.aio as aio
from tests.integration.cutting_proxy import CuttingProxy
from walog.errors import DigestMismatchError
from walog.metadata.layout import LedgerMetadata, ledger_path
from walog.testing import LocalCluster

PAYLOAD = b"payload-that-a-faulty-link-damages"


@pytest.fixture
def grpc_only(tmp_path: Path) -> Iterator[LocalCluster]:
    # gRPC only, so every answer passes through the proxy (no native port or socket).
    args = ["--native-port", "-1"]
    with LocalCluster(bookies=1, data_dir=tmp_path / "c", bookie_args=args) as local:
        yield local


async def test_a_copy_damaged_in_transit_is_never_served(grpc_only: LocalCluster) -> None:
    cluster = grpc_only
    async with await aio.connect(cluster.metadata_uri) as client:
        writer = await client.create_ledger(1, 1, 1)
        await writer.append(PAYLOAD)
        await writer.close()
        host, port = cluster.bookie_ids[0].rsplit(":", 1)
        with CuttingProxy((host, int(port))) as proxy:
            # The ledger's only copy, reached through the proxy.
            raw, version = await client.ctx.store.get(ledger_path(writer.ledger_id))
            metadata = LedgerMetadata.from_json(raw)
            through = f"127.0.0.1:{proxy.port}"
            moved = metadata.with_changes(ensembles=((0, (through,)),))
            await client.ctx.store.set(ledger_path(writer.ledger_id), moved.to_json(), version)
            async with await aio.connect(cluster.metadata_uri) as reader_client:
                reader = await reader_client.open_ledger(writer.ledger_id)
                assert [e.data for e in await reader.read(0, 0)] == [PAYLOAD]
                proxy.damage_answers(PAYLOAD[:8])
                with pytest.raises(DigestMismatchError, match="failed their digest check"):
                    await reader.read(0, 0)
                proxy.damage_answers(None)
                await asyncio.sleep(0)
                assert [e.data for e in await reader.read(0, 0)] == [PAYLOAD]

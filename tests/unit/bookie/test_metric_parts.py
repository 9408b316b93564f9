"""The running bookie's parts as its metrics collector reads them (bookie/metric_parts.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from bookie.config import BookieConfig
from bookie.disks import DiskMonitor
from bookie.gc import LedgerCollector
from bookie.metric_parts import BookieParts
from bookie.metrics import BookieCollector
from bookie.server.grpc_port import BookieServer
from tests.unit.bookie.helpers import add, open_core
from walog.metadata import open_store


async def _no_change(reason: str | None) -> None:
    del reason


async def test_registering_the_collector_on_the_event_loop_reads_loop_state_at_once(
    tmp_path: Path,
) -> None:
    """The bookie registers its collector on its event loop, and the registry collects
    once then: the loop-owned gauges are read there and then, not by a callback the loop
    could only run after the wait for it timed out (the loop standing still meanwhile)."""
    config = BookieConfig(
        data_dir=tmp_path / "data", listen="127.0.0.1:3181", metadata=f"sqlite:///{tmp_path}/m.db"
    )
    store = await open_store(config.metadata)
    core = await open_core(config.data_dir)
    try:
        await add(core, 7, 0)
        server = BookieServer(config, core, "instance")
        collector = LedgerCollector(core, store, {}, interval=60.0, grace=60.0)
        disks = DiskMonitor(
            [config.data_dir], config.disk_thresholds(), 60.0, lambda: None, _no_change
        )
        parts = BookieParts(server, core, collector, disks, asyncio.get_running_loop())
        registry = CollectorRegistry(auto_describe=True)
        registry.register(BookieCollector(parts, "h:1", {"data": config.data_dir}, {}))
        assert registry.get_sample_value("walog_bookie_ledgers", {"bookie": "h:1"}) == 1
    finally:
        await core.close()
        await store.close()

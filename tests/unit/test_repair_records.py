"""Repair records (``/underreplication/ledgers/<id>``) carry their format version, and both
of their readers check it: the autorecovery worker, and a bookie adding itself to a record
when it finds a damaged copy. A newer record is left as it is, with one error naming both
versions; a record without the field (walog 0.1.0) reads as version 1
(docs/compatibility.md). Over a real SQLite metadata store."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

import pytest

from bookie.notices import DamageReports
from tests.integration.waiting import eventually
from walog import aio
from walog.autorecovery.daemon import Daemon
from walog.metadata.layout import REPAIR_RECORD_FORMAT, under_replicated_path
from walog.metadata.store import MetadataStore

NEWER = {"format": REPAIR_RECORD_FORMAT + 1, "lost": ["gone:1"], "a_field_of_the_next_format": 1}
BOTH = re.escape(
    f"has format version {REPAIR_RECORD_FORMAT + 1}; "
    f"this walog reads up to {REPAIR_RECORD_FORMAT}: upgrade walog"
)


async def _record(store: MetadataStore, ledger_id: int) -> object:
    raw, _ = await store.get(under_replicated_path(ledger_id))
    return json.loads(raw)


async def test_a_newer_repair_record_version_is_refused_naming_both_versions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with await aio.connect(f"sqlite://{tmp_path}/meta.db") as client:
        store = client.ctx.store
        await store.create(under_replicated_path(7), json.dumps(NEWER).encode())
        # Version 1 as walog 0.1.0 wrote it; its ledger is gone, so the repair has nothing
        # to do and removes it. The worker takes the records in order: 7, then 8.
        await store.create(under_replicated_path(8), json.dumps({"lost": ["gone:1"]}).encode())
        daemon = Daemon(client.ctx, "daemon-1", [b""], interval_s=0.05, lost_after_s=60.0)
        stop = asyncio.Event()
        caplog.set_level(logging.ERROR, logger="walog.autorecovery")
        running = asyncio.create_task(daemon.run(stop))

        async def version_1_repaired() -> None:
            assert await store.exists(under_replicated_path(8)) is None

        try:
            await eventually(version_1_repaired)
        finally:
            stop.set()
            await running
        assert await _record(store, 7) == NEWER
        assert daemon.repaired_ledgers == [8]
    refused = [r.getMessage() for r in caplog.records if "repair record not read" in r.getMessage()]
    assert len(refused) == 1 and re.search("ledger 7's repair record " + BOTH, refused[0])


async def test_a_bookie_adds_itself_only_to_repair_records_it_reads(tmp_path: Path) -> None:
    async with await aio.connect(f"sqlite://{tmp_path}/meta.db") as client:
        store = client.ctx.store
        reports = DamageReports(store, "bookie-1:3181")
        await store.create(under_replicated_path(7), json.dumps(NEWER).encode())
        await reports.publish(7)
        assert await _record(store, 7) == NEWER  # not guessed at: left to a newer walog
        await store.create(under_replicated_path(8), json.dumps({"lost": ["gone:1"]}).encode())
        await reports.publish(8)
        assert await _record(store, 8) == {"lost": ["gone:1"], "damaged_on": ["bookie-1:3181"]}
        await reports.publish(9)
        assert await _record(store, 9) == {
            "format": REPAIR_RECORD_FORMAT,
            "damaged_on": ["bookie-1:3181"],
        }

"""Plain adds and read-only mode in the storage engine: an add is refused READ_ONLY once the
bookie turned read-only, also one that was waiting when it did."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tests.unit.bookie.helpers import add, open_core, payload
from walog.wire.status import Status

CACHE_BYTES = 4096
"""The write cache's size: adds wait for a running checkpoint above twice that."""


async def test_an_add_held_back_by_a_full_write_cache_is_refused_once_the_bookie_is_read_only(
    tmp_path: Path,
) -> None:
    """An add that waits for a checkpoint to free memory passed the read-only check before it
    waited: taken after a switch to read-only, it would write into the disk's reserve (the
    admission limit lets hundreds of MiB wait so), and the journal meet a full disk."""
    core = await open_core(tmp_path, write_cache_bytes=CACHE_BYTES)
    storage_thread_free = threading.Event()
    # The storage thread is busy: the checkpoint a full cache starts freezes the cache, then
    # waits for the thread.
    held = asyncio.ensure_future(core._writer.run(storage_thread_free.wait))
    checkpoints = core.checkpoints
    entry_id = 0
    while checkpoints.unwritten_bytes == checkpoints.cache.bytes:  # no frozen cache yet
        assert (await add(core, 1, entry_id, data=payload(1, entry_id, 512)))[0] is Status.OK
        entry_id += 1
    while checkpoints.cache.bytes < 2 * CACHE_BYTES:
        assert (await add(core, 1, entry_id, data=payload(1, entry_id, 512)))[0] is Status.OK
        entry_id += 1
    waiting = asyncio.ensure_future(add(core, 1, entry_id, data=payload(1, entry_id, 512)))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not waiting.done()  # held back until the checkpoint frees its cache
    core.read_only_reason = "disk full: /data 95.2% used (threshold 95%)"
    storage_thread_free.set()
    await held
    status, _ = await waiting
    assert status is Status.READ_ONLY
    assert checkpoints.cached(1, entry_id) is None  # neither cached nor journaled
    # A recovery write is still taken.
    assert (await add(core, 1, entry_id, recovery=True))[0] is Status.OK
    await core.close()

"""Fencing costs one journal record and one sync per ledger (seed 002, "Fencing").

A fence is persisted before it is first acknowledged; fences of a ledger whose fence is
already durable answer without touching the journal, and fences that arrive while the first
one is being persisted wait for that same sync.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from bookie.storage.engine import BookieCore
from bookie.storage.journal_records import fence_record, key_record
from tests.unit.bookie.helpers import KEY, add, open_core, python_journal_writer
from walog.wire.status import Status


@pytest.fixture(autouse=True)
def _python_journal_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    python_journal_writer(monkeypatch)  # its os.fdatasync is the one SyncCounter counts


class SyncCounter:
    """Counts ``os.fdatasync`` calls; while ``hold`` is cleared, syncs block until set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.hold = threading.Event()
        self.hold.set()
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            self.calls += 1
            self.entered.set()
            if not self.hold.wait(timeout=30):
                raise OSError("test gate never opened")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)


def before_appends(
    core: BookieCore, monkeypatch: pytest.MonkeyPatch, see: Callable[[Sequence[bytes]], None]
) -> None:
    """``see`` is called with every record queued to the core's journal from now on, before
    it is queued (an exception it raises is the append's)."""
    append = core.journal.append

    def seen_append(parts: Sequence[bytes], **kwargs: object) -> object:
        see(parts)
        return append(parts, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(core.journal, "append", seen_append)


def count_fence_records(core: BookieCore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Ledger ids of the FENCE records queued to the core's journal from now on."""
    fenced: list[int] = []

    def count(parts: Sequence[bytes]) -> None:
        fenced.extend(i for i in (1, 2) if parts and parts[0] == fence_record(i))

    before_appends(core, monkeypatch, count)
    return fenced


async def test_fence_of_a_durably_fenced_ledger_neither_writes_nor_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(3):
        await add(core, 1, entry_id)
    syncs = SyncCounter(monkeypatch)
    records = count_fence_records(core, monkeypatch)
    assert await core.fence(1, KEY) == (Status.OK, 1, 2)
    assert records == [1]
    assert syncs.calls == 1
    written = core.stats.journal_bytes
    for _ in range(5):
        assert await core.fence(1, KEY) == (Status.OK, 1, 2)
    assert records == [1]
    assert syncs.calls == 1
    assert core.stats.journal_bytes == written
    assert (await add(core, 1, 3))[0] is Status.FENCED
    await core.abandon()

    # A fence replayed from disk is durable too.
    monkeypatch.undo()
    core = await open_core(tmp_path)
    syncs = SyncCounter(monkeypatch)
    records = count_fence_records(core, monkeypatch)
    assert await core.fence(1, KEY) == (Status.OK, 1, 2)
    assert records == []
    assert syncs.calls == 0
    await core.close()


async def test_concurrent_first_fences_all_wait_for_the_one_persisting_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    await add(core, 1, 0)  # the master key is journaled and synced before the fences
    syncs = SyncCounter(monkeypatch)
    records = count_fence_records(core, monkeypatch)
    syncs.hold.clear()
    fences = [asyncio.ensure_future(core.fence(1, KEY)) for _ in range(3)]
    # The first fence's record is being synced: the journal thread is inside fdatasync.
    assert await asyncio.to_thread(syncs.entered.wait, 30)
    late = asyncio.ensure_future(core.fence(1, KEY))
    done, _ = await asyncio.wait([*fences, late], timeout=0.05)
    assert not done, "a fence was acknowledged before the fence record was synced"
    assert records == [1]
    assert (await add(core, 1, 1))[0] is Status.FENCED  # refused from the first fence on
    syncs.hold.set()
    assert await asyncio.gather(*fences, late) == [(Status.OK, -1, 0)] * 4
    assert records == [1]
    assert syncs.calls == 1
    await core.close()


async def test_cancelled_fence_does_not_cancel_the_others_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    await add(core, 2, 0)
    syncs = SyncCounter(monkeypatch)
    syncs.hold.clear()
    first = asyncio.ensure_future(core.fence(2, KEY))
    second = asyncio.ensure_future(core.fence(2, KEY))
    assert await asyncio.to_thread(syncs.entered.wait, 30)
    first.cancel()
    syncs.hold.set()
    assert await second == (Status.OK, -1, 0)
    assert first.cancelled()
    assert await core.fence(2, KEY) == (Status.OK, -1, 0)
    assert syncs.calls == 1
    await core.close()


async def test_ledger_deleted_while_its_fence_syncs_is_fenced_anew_when_recreated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    await add(core, 1, 0)
    syncs = SyncCounter(monkeypatch)
    records = count_fence_records(core, monkeypatch)
    syncs.hold.clear()
    first = asyncio.ensure_future(core.fence(1, KEY))
    assert await asyncio.to_thread(syncs.entered.wait, 30)
    deleted = asyncio.ensure_future(core.delete_ledgers([1]))
    while core.ledgers():  # the deletion forgets the ledger before its record is synced
        await asyncio.wait([deleted], timeout=0.01)
    second = asyncio.ensure_future(core.fence(1, KEY))  # recreates the ledger
    done, _ = await asyncio.wait([second], timeout=0.05)
    assert not done
    assert core.is_fenced(1)
    assert records == [1, 1]
    syncs.hold.set()
    assert await first == (Status.OK, -1, 0)
    await deleted
    assert await second == (Status.OK, -1, -1)
    assert (await add(core, 1, 0))[0] is Status.FENCED
    await core.close()


class _QueueingFailed(Exception):
    """What a journal append raised (any failure other than the journal's own errors)."""


def fail_queueing(core: BookieCore, monkeypatch: pytest.MonkeyPatch, record: bytes) -> None:
    """The next append of ``record`` to the core's journal raises :class:`_QueueingFailed`."""
    armed = [True]

    def fail(parts: Sequence[bytes]) -> None:
        if armed[0] and parts and parts[0] == record:
            armed[0] = False
            raise _QueueingFailed

    before_appends(core, monkeypatch, fail)


async def test_a_fence_whose_record_was_never_queued_leaves_the_ledger_unfenced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    await add(core, 1, 0)
    fail_queueing(core, monkeypatch, fence_record(1))
    with pytest.raises(_QueueingFailed):
        await core.fence(1, KEY)
    assert not core.is_fenced(1)  # no mark that no record backs
    records = count_fence_records(core, monkeypatch)
    assert await core.fence(1, KEY) == (Status.OK, -1, 0)
    assert records == [1]  # answered on a record of its own, not on the failed one's mark
    await core.abandon()
    core = await open_core(tmp_path)
    assert core.is_fenced(1)
    await core.close()


async def test_a_deleted_ledger_whose_key_record_was_never_queued_still_refuses_plain_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    await add(core, 1, 0)
    await core.delete_ledgers([1])
    fail_queueing(core, monkeypatch, key_record(1, KEY))
    with pytest.raises(_QueueingFailed):
        await core.fence(1, KEY)  # would recreate the ledger, fenced
    assert core.ledgers() == []  # no state left behind
    assert (await add(core, 1, 1))[0] is Status.FENCED
    await core.close()

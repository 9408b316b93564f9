"""A checkpoint's mark never passes a journal record the checkpoint does not persist.

Replay starts at the mark of the last checkpoint, so a record journaled before the mark
survives a crash only through what that checkpoint stored: its entries (the frozen write
cache) and its ledger's state (the dirty ledgers). The engine freezes the cache, takes the
dirty ledgers and queues the barrier that becomes the mark in one synchronous step; no
await may fall between them, not even the disk probe a checkpoint after a failed one
makes.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from bookie.storage.engine import BookieCore
from bookie.storage.journal_files import StorageIOError
from tests.unit.bookie.helpers import KEY, add, open_core, payload
from walog.mutations import enabled_mutations
from walog.wire.status import Status


async def _records_during_a_slow_probe(core: BookieCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail one checkpoint, then run the next one whose disk probe waits until a fence of
    new ledger 7 and a recovery write of new ledger 8 were answered."""
    storage = core._storage
    assert storage is not None
    assert (await add(core, 1, 0))[0] is Status.OK  # something for the checkpoints

    def fail(*_args: object, **_kwargs: object) -> int:
        raise StorageIOError("entry log write failed (injected)")

    monkeypatch.setattr(storage, "checkpoint", fail)
    with pytest.raises(StorageIOError):
        await core.checkpoint()
    assert core.checkpoints.failure is not None
    monkeypatch.undo()

    probing, go_on = threading.Event(), threading.Event()
    probe = storage.probe

    def slow_probe() -> None:
        probing.set()
        go_on.wait(10)
        probe()

    monkeypatch.setattr(storage, "probe", slow_probe)
    checkpoint = asyncio.ensure_future(core.checkpoint())
    await asyncio.get_running_loop().run_in_executor(None, probing.wait, 10)
    assert (await core.fence(7, KEY))[0] is Status.OK
    assert (await add(core, 8, 0, recovery=True))[0] is Status.OK
    go_on.set()
    await checkpoint
    assert core.checkpoints.failure is None


async def _forgotten(path: Path) -> list[str]:
    """What a reopened store lost of the fence of ledger 7 and the write to ledger 8."""
    core = await open_core(path)
    lost = []
    if not core.is_fenced(7) or (await add(core, 7, 0))[0] is not Status.FENCED:
        lost.append("the fence of ledger 7")
    status, records = await core.read(8, 0, 0)
    if status is not Status.OK or records[0].data != payload(8, 0):
        lost.append(f"ledger 8 entry 0 (read {status.name})")
    await core.close()
    return lost


async def test_every_record_journaled_before_a_checkpoint_mark_is_in_what_it_persists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    await _records_during_a_slow_probe(core, monkeypatch)
    await core.abandon()  # a crash: nothing but the checkpoint and the journal after its mark
    assert await _forgotten(tmp_path) == []


async def test_probing_between_the_freeze_and_the_barrier_forgets_answered_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted bug ``checkpoint_probes_after_freezing`` loses what the rule keeps."""
    core = await open_core(tmp_path)
    with enabled_mutations("checkpoint_probes_after_freezing"):
        await _records_during_a_slow_probe(core, monkeypatch)
    await core.abandon()
    assert await _forgotten(tmp_path) == [
        "the fence of ledger 7",
        "ledger 8 entry 0 (read NO_SUCH_LEDGER)",
    ]

"""A bookie keeps every ledger it deleted fenced for good (docs/protocol.md, "Fencing").

A writer that never learnt that its ledger was closed and deleted (a zombie) must not be
able to recreate it on a bookie that had fenced it: with enough such bookies it would be
acknowledged for entries no ledger of the cluster holds. Each case holds live, after a
restart that replays the journal, and after a restart from a checkpointed index.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bookie.storage.engine import BookieCore
from bookie.storage.tombstones import Tombstones
from tests.unit.bookie.helpers import KEY, OTHER_KEY, add, open_core, read_all
from walog.wire.status import Status

Restart = Callable[[BookieCore, Path], Awaitable[BookieCore]]


async def _live(core: BookieCore, _path: Path) -> BookieCore:
    return core


async def _replayed(core: BookieCore, path: Path) -> BookieCore:
    await core.abandon()  # no checkpoint: the journal alone carries the deletion
    return await open_core(path)


async def _checkpointed(core: BookieCore, path: Path) -> BookieCore:
    await core.checkpoint()
    await core.abandon()
    return await open_core(path)


RESTARTS = pytest.mark.parametrize(
    "restart", [_live, _replayed, _checkpointed], ids=["live", "replayed", "checkpointed"]
)


async def _deleted_ledger(path: Path, *, fenced: bool) -> BookieCore:
    core = await open_core(path)
    for entry_id in range(3):
        assert (await add(core, 7, entry_id))[0] is Status.OK
    if fenced:
        assert (await core.fence(7, KEY))[0] is Status.OK
    await core.delete_ledgers([7])
    return core


@RESTARTS
@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
async def test_a_deleted_ledger_refuses_plain_adds_as_fenced_for_good(
    tmp_path: Path, restart: Restart, fenced: bool
) -> None:
    core = await restart(await _deleted_ledger(tmp_path, fenced=fenced), tmp_path)
    assert (await add(core, 7, 3))[0] is Status.FENCED
    assert (await add(core, 7, 0))[0] is Status.FENCED
    assert core.is_fenced(7)
    assert core.ledgers() == []  # nothing recreated
    assert (await core.read(7, 0, 0))[0] is Status.NO_SUCH_LEDGER
    await core.close()


@RESTARTS
async def test_a_recovery_write_recreates_a_deleted_ledger_fenced(
    tmp_path: Path, restart: Restart
) -> None:
    core = await _deleted_ledger(tmp_path, fenced=True)
    assert (await add(core, 7, 0, recovery=True))[0] is Status.OK
    core = await restart(core, tmp_path)
    assert sorted(await read_all(core, 7, 5)) == [0]
    assert (await add(core, 7, 1))[0] is Status.FENCED
    assert core.is_fenced(7)
    await core.close()


@RESTARTS
async def test_a_fence_of_a_deleted_ledger_is_answered_and_holds(
    tmp_path: Path, restart: Restart
) -> None:
    core = await _deleted_ledger(tmp_path, fenced=False)
    assert await core.fence(7, KEY) == (Status.OK, -1, -1)
    assert await core.fence(7, OTHER_KEY) == (Status.UNAUTHORIZED, -1, -1)
    core = await restart(core, tmp_path)
    assert (await add(core, 7, 0))[0] is Status.FENCED
    await core.close()


async def test_other_ledgers_are_not_fenced_by_a_deletion(tmp_path: Path) -> None:
    core = await _deleted_ledger(tmp_path, fenced=True)
    core = await _checkpointed(core, tmp_path)
    for ledger_id in (6, 8):
        assert (await add(core, ledger_id, 0))[0] is Status.OK
        assert not core.is_fenced(ledger_id)
    await core.close()


def test_tombstones_keep_ids_as_merged_runs() -> None:
    tombstones = Tombstones([5, 3, 4, 9, 11])
    assert tombstones.runs == [(3, 5), (9, 9), (11, 11)]
    tombstones.add_all([10, 2, 4])
    assert tombstones.runs == [(2, 5), (9, 11)]
    assert [n for n in range(13) if n in tombstones] == [2, 3, 4, 5, 9, 10, 11]
    assert len(tombstones) == 7
    assert Tombstones.from_bytes(tombstones.to_bytes()) == tombstones
    assert Tombstones.from_bytes(Tombstones().to_bytes()) == Tombstones()


@pytest.mark.parametrize(
    "runs",
    [[(5, 4)], [(1, 3), (4, 6)], [(4, 6), (1, 2)]],
    ids=["backwards", "adjacent", "unsorted"],
)
def test_tombstones_refuse_a_malformed_stored_set(runs: list[tuple[int, int]]) -> None:
    payload = b"".join(a.to_bytes(8, "big") + b.to_bytes(8, "big") for a, b in runs)
    assert Tombstones.from_bytes(payload) is None
    assert Tombstones.from_bytes(b"\0" * 17) is None

"""Random workloads across many open/crash/close cycles keep every acknowledged fact.

Each cycle opens the store, runs concurrent adds (both durabilities) on several ledgers
mixed with checkpoints, fences, forces, LAC updates and deletions, then closes cleanly or
abandons the store like a crash. After every reopen: every acknowledged entry is served
with its data, deleted ledgers stay deleted, fences hold, LAC and sync cursors never go
backwards. The seed is in the test id, so a failure can be replayed.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bookie.storage.engine import BookieCore
from tests.unit.bookie.helpers import KEY, add, open_core, payload
from walog.wire.durability import Durability
from walog.wire.status import Status


@dataclass
class Model:
    """What the store acknowledged, per ledger."""

    entries: dict[int, set[int]] = field(default_factory=dict)
    fenced: set[int] = field(default_factory=set)
    deleted: set[int] = field(default_factory=set)
    lac: dict[int, int] = field(default_factory=dict)
    synced: dict[int, int] = field(default_factory=dict)
    next_entry: dict[int, int] = field(default_factory=dict)


def _size(ledger_id: int, entry_id: int) -> int:
    return 50 + (ledger_id * 7919 + entry_id * 104729) % 700


async def _verify(core: BookieCore, model: Model) -> None:
    assert not set(core.ledgers()) & model.deleted
    for ledger_id, acked in model.entries.items():
        if ledger_id in model.deleted:
            continue
        for entry_id in sorted(acked):
            status, records = await core.read(ledger_id, entry_id, entry_id)
            assert status is Status.OK, (ledger_id, entry_id, status)
            assert records[0].data == payload(ledger_id, entry_id, _size(ledger_id, entry_id))
        assert core.lac(ledger_id) >= model.lac.get(ledger_id, -1)
        assert core.last_add_synced(ledger_id) >= model.synced.get(ledger_id, -1)
        assert core.is_fenced(ledger_id) == (ledger_id in model.fenced)


async def _writer(core: BookieCore, model: Model, rng: random.Random, ledger_id: int) -> None:
    volatile = ledger_id % 2 == 0
    durability = Durability.VOLATILE if volatile else Durability.PERSISTENT
    for _ in range(rng.randint(5, 40)):
        entry_id = model.next_entry.get(ledger_id, 0)
        model.next_entry[ledger_id] = entry_id + 1
        acked = model.entries.setdefault(ledger_id, set())
        lac = max((e for e in acked if e < entry_id), default=-1) if rng.random() < 0.8 else -1
        data = payload(ledger_id, entry_id, _size(ledger_id, entry_id))
        status, synced = await add(
            core, ledger_id, entry_id, lac=lac, data=data, durability=durability
        )
        if ledger_id in model.fenced:
            assert status is Status.FENCED
            return
        assert status is Status.OK
        acked.add(entry_id)
        model.lac[ledger_id] = max(model.lac.get(ledger_id, -1), lac)
        model.synced[ledger_id] = max(model.synced.get(ledger_id, -1), synced)
    if volatile and rng.random() < 0.5:
        status, synced = await core.force(ledger_id, KEY)
        assert status is Status.OK
        model.synced[ledger_id] = max(model.synced[ledger_id], synced)


async def _cycle(path: Path, model: Model, rng: random.Random) -> None:
    core = await open_core(
        path,
        write_cache_bytes=rng.choice([8_000, 64_000, 1 << 20]),
        entry_log_file_bytes=rng.choice([16_000, 1 << 20]),
        journal_file_bytes=rng.choice([20_000, 1 << 20]),
    )
    await _verify(core, model)
    live = [n for n in range(1, 9) if n not in model.deleted and n not in model.fenced]
    chosen = rng.sample(live, k=min(len(live), rng.randint(1, 4)))
    tasks = [_writer(core, model, rng, ledger_id) for ledger_id in chosen]
    if rng.random() < 0.5:
        tasks.append(core.checkpoint())
    await asyncio.gather(*tasks)
    if chosen and rng.random() < 0.3:
        victim = rng.choice(chosen)
        status, _, _ = await core.fence(victim, KEY)
        assert status is Status.OK
        model.fenced.add(victim)
    if chosen and rng.random() < 0.2:
        victim = rng.choice(chosen)
        await core.delete_ledgers([victim])
        model.deleted.add(victim)
    for ledger_id in chosen:
        if ledger_id not in model.deleted and rng.random() < 0.3:
            lac = max(model.entries.get(ledger_id, {-1}))
            if core.update_lac(ledger_id, lac, KEY) is Status.OK:
                await core.force(ledger_id, KEY)  # explicit LACs are not acknowledged
                model.lac[ledger_id] = max(model.lac.get(ledger_id, -1), lac)
    await _verify(core, model)
    if rng.random() < 0.5:
        await core.close()
    else:
        await core.abandon()


async def _run(path: Path, seed: int, cycles: int) -> None:
    rng = random.Random(seed)
    model = Model()
    for _ in range(cycles):
        await _cycle(path, model, rng)
    core = await open_core(path)
    await _verify(core, model)
    await core.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_acknowledged_facts_survive_random_crash_cycles(tmp_path: Path, seed: int) -> None:
    await _run(tmp_path, seed, cycles=6)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 120))
async def test_acknowledged_facts_survive_many_random_crash_cycles(
    tmp_path: Path, seed: int
) -> None:
    await _run(tmp_path, seed, cycles=40)

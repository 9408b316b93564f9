"""Entry-log compaction (bookie/compaction.py): which logs, space given back, rate limit,
steps that never bring a deleted ledger back."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from pathlib import Path

import pytest

from bookie.compaction import CompactionPolicy, logs_to_compact
from bookie.storage import EntryStorage
from tests.unit.bookie.helpers import add, open_core, payload, read_all

SIZE = 2000


def test_logs_below_the_threshold_are_taken_emptiest_first() -> None:
    shares = {1: 0.5, 2: 0.05, 3: 0.19, 4: 0.2, 5: 0.0}
    assert logs_to_compact(shares, 0.2) == [5, 2, 3]
    assert logs_to_compact(shares, 0.0) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"minor_threshold": 0.9, "major_threshold": 0.8},
        {"major_threshold": 1.0},
        {"minor_threshold": -0.1},
        {"minor_interval_s": -1.0},
        {"rate_bytes": 0},
    ],
)
def test_inconsistent_compaction_settings_are_refused(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="compaction"):
        CompactionPolicy(**changes)  # type: ignore[arg-type]


async def _interleaved(path: Path, ledgers: int, rounds: int, **overrides: object):  # type: ignore[no-untyped-def]
    core = await open_core(path, entry_log_file_bytes=64 * 1024, **overrides)
    for entry_id in range(rounds):
        for ledger_id in range(1, ledgers + 1):
            await add(core, ledger_id, entry_id, data=payload(ledger_id, entry_id, SIZE))
        if entry_id % 10 == 9:
            await core.checkpoint()
    await core.checkpoint()
    return core


def _log_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path / "entrylogs").glob("*.log"))


async def test_compaction_gives_back_the_space_of_deleted_ledgers(tmp_path: Path) -> None:
    core = await _interleaved(tmp_path, ledgers=10, rounds=60)
    before = _log_bytes(tmp_path)
    await core.delete_ledgers(range(2, 11))  # 90 % of the data is dead now
    # Logs left without live data are gone already; the ones shared with ledger 1 wait.
    shares = await core.in_storage(lambda s: s.live_shares())
    assert any(share < 0.5 for share in shares.values())
    assert await core.compactor.compact(0.5) > 0
    after = _log_bytes(tmp_path)
    # Ledger 1's tenth stays, plus the log being filled (at most one log's worth).
    assert after <= before * 0.1 + 64 * 1024 + SIZE, (before, after)
    expected = {i: payload(1, i, SIZE) for i in range(60)}
    assert await read_all(core, 1, 59) == expected
    await core.close()
    core = await open_core(tmp_path)
    assert await read_all(core, 1, 59) == expected
    await core.close()


def _open_entry_logs(path: Path) -> list[str]:
    """The entry logs under ``path`` this process holds a descriptor of."""
    logs = str(path / "entrylogs")
    targets = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile (the listing's own)
            targets.append(os.readlink(fd))
    return [target for target in targets if target.startswith(logs)]


async def test_compaction_keeps_no_descriptor_of_the_logs_it_removed(tmp_path: Path) -> None:
    """A removed log whose file is still open keeps its blocks: the disk stays full."""
    core = await _interleaved(tmp_path, ledgers=10, rounds=60)
    await core.delete_ledgers(range(2, 11))
    assert await core.compactor.compact(0.5) > 0
    removed = [target for target in _open_entry_logs(tmp_path) if target.endswith("(deleted)")]
    assert removed == []
    await core.close()


async def test_compaction_copies_no_faster_than_its_rate(tmp_path: Path) -> None:
    rate = 100_000
    core = await _interleaved(
        tmp_path, ledgers=2, rounds=150, compaction=CompactionPolicy(rate_bytes=rate)
    )
    await core.delete_ledgers([2])  # every log is half live
    started = time.monotonic()
    await core.compactor.compact(0.6)
    elapsed = time.monotonic() - started
    moved = core.compactor.bytes_moved
    assert moved >= 50 * SIZE
    assert elapsed >= moved / rate * 0.9
    await core.close()


async def test_a_ledger_deleted_between_compaction_steps_stays_deleted(tmp_path: Path) -> None:
    core = await _interleaved(tmp_path, ledgers=3, rounds=20)
    await core.delete_ledgers([3])
    shares = await core.in_storage(lambda s: s.live_shares())
    log_id = min(shares)

    def step(storage: EntryStorage, after: tuple[int, int] | None) -> tuple[object, int]:
        return storage.compact_step(log_id, after, 3 * SIZE)

    after, moved = await core.in_storage(functools.partial(step, after=None))
    assert after is not None and after[0] == 1 and moved > 0
    await core.delete_ledgers([2])  # between two steps
    while after is not None:
        after, _ = await core.in_storage(functools.partial(step, after=after))
    assert log_id not in await core.in_storage(lambda s: s.live_shares())
    assert 2 not in core.ledgers()
    assert await read_all(core, 2, 19) == {}
    assert await read_all(core, 1, 19) == {i: payload(1, i, SIZE) for i in range(20)}
    await core.close()

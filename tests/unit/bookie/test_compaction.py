"""Entry-log compaction (bookie/storage/compaction.py): which logs, space given back, rate limit,
steps that never bring a deleted ledger back, a log the disk failed to read kept for a
later pass while a damaged record is left behind."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import time
from pathlib import Path

import pytest

from bookie.storage.compaction import ROOM_MARGIN_BYTES, CompactionPolicy, fits, logs_to_compact
from bookie.storage.engine import BookieCore
from bookie.storage.entry_storage import EntryStorage
from tests.unit.bookie.helpers import add, open_core, payload, read_all
from walog import mutations
from walog.wire.status import Status

SIZE = 2000


def test_logs_below_the_threshold_are_taken_emptiest_first() -> None:
    shares = {1: 0.5, 2: 0.05, 3: 0.19, 4: 0.2, 5: 0.0}
    assert logs_to_compact(shares, 0.2) == [5, 2, 3]
    assert logs_to_compact(shares, 0.0) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"minor_compaction_threshold": 0.9, "major_compaction_threshold": 0.8},
        {"major_compaction_threshold": 1.0},
        {"minor_compaction_threshold": -0.1},
        {"minor_compaction_interval_s": -1.0},
        {"compaction_rate_bytes": 0},
    ],
)
def test_inconsistent_compaction_settings_are_refused(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="compaction"):
        CompactionPolicy(**changes)  # type: ignore[arg-type]


async def _interleaved(path: Path, ledgers: int, rounds: int, **overrides: object):  # type: ignore[no-untyped-def]
    core = await open_core(path, **{"entry_log_file_bytes": 64 * 1024, **overrides})
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
    shares = await core.in_storage(lambda s: s.space.live_shares())
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
        tmp_path, ledgers=2, rounds=150, compaction=CompactionPolicy(compaction_rate_bytes=rate)
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
    shares = await core.in_storage(lambda s: s.space.live_shares())
    log_id = min(shares)

    def step(storage: EntryStorage, after: tuple[int, int] | None) -> tuple[object, int]:
        return storage.compact_step(log_id, after, 3 * SIZE)

    after, moved = await core.in_storage(functools.partial(step, after=None))
    assert after is not None and after[0] == 1 and moved > 0
    await core.delete_ledgers([2])  # between two steps
    while after is not None:
        after, _ = await core.in_storage(functools.partial(step, after=after))
    assert log_id not in await core.in_storage(lambda s: s.space.live_shares())
    assert 2 not in core.ledgers()
    assert await read_all(core, 2, 19) == {}
    assert await read_all(core, 1, 19) == {i: payload(1, i, SIZE) for i in range(20)}
    await core.close()


def _failing_preads(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[Path]:
    """The next ``failures`` reads of a file fail with EIO, then the disk reads again (a
    transient error); returns the files whose reads failed."""
    real = os.pread
    failed: list[Path] = []

    def pread(fd: int, length: int, offset: int) -> bytes:
        if len(failed) < failures:
            failed.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real(fd, length, offset)

    monkeypatch.setattr(os, "pread", pread)
    return failed


async def _compact_through_one_eio(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[BookieCore, Path]:
    """Compact ledger 1's logs once while the first read of the pass fails with EIO; the
    core and the log whose read failed."""
    core = await _interleaved(path, ledgers=10, rounds=60)
    await core.delete_ledgers(range(2, 11))
    failed = _failing_preads(monkeypatch, failures=1)
    await core.compactor.compact(0.5)
    (unreadable,) = failed
    return core, unreadable


EXPECTED = {i: payload(1, i, SIZE) for i in range(60)}


async def test_compaction_never_removes_an_entry_log_it_could_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core, unreadable = await _compact_through_one_eio(tmp_path, monkeypatch)
    assert unreadable.exists(), "the log whose read failed was deleted"
    assert core.stats.compaction_read_errors == 1
    assert await read_all(core, 1, 59) == EXPECTED
    # The disk reads again: the next pass takes the log again and compacts it.
    assert await core.compactor.compact(0.5) == 1
    assert not unreadable.exists()
    assert core.stats.compaction_read_errors == 1
    assert await read_all(core, 1, 59) == EXPECTED
    await core.close()
    core = await open_core(tmp_path)
    assert await read_all(core, 1, 59) == EXPECTED
    await core.close()


async def test_with_compaction_skips_unreadable_a_transient_eio_loses_an_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted bug: the entry the disk failed to read is taken for a damaged one."""
    with mutations.enabled_mutations("compaction_skips_unreadable"):
        core, unreadable = await _compact_through_one_eio(tmp_path, monkeypatch)
    assert not unreadable.exists()
    assert core.stats.compaction_read_errors == 0
    served = await read_all(core, 1, 59)
    assert len(served) == 59 and served.items() <= EXPECTED.items()
    (lost,) = EXPECTED.keys() - served.keys()
    assert (await core.read(1, lost, lost))[0] is Status.IO_ERROR
    await core.close()


async def test_compaction_leaves_a_damaged_record_behind_and_removes_its_log(
    tmp_path: Path,
) -> None:
    """Real damage (a record read whole whose digest fails) is not a read error: that copy
    is lost either way, its reads answer IO_ERROR (auto-recovery copies it back), and the
    log's space comes back."""
    core = await _interleaved(tmp_path, ledgers=10, rounds=60)
    await core.delete_ledgers(range(2, 11))
    damaged = 3
    for log in (tmp_path / "entrylogs").glob("*.log"):
        raw = bytearray(log.read_bytes())
        at = raw.find(payload(1, damaged, SIZE))
        if at >= 0:
            raw[at + SIZE // 2] ^= 0x10
            log.write_bytes(bytes(raw))
            break
    else:
        pytest.fail(f"entry {damaged} of ledger 1 is in no entry log")
    assert await core.compactor.compact(0.5) > 0
    assert not log.exists()
    assert core.stats.compaction_read_errors == 0
    assert (await core.read(1, damaged, damaged))[0] is Status.IO_ERROR
    assert await read_all(core, 1, 59) == {i: data for i, data in EXPECTED.items() if i != damaged}
    await core.close()


async def test_compaction_takes_only_the_logs_whose_live_bytes_fit_in_the_room_left(
    tmp_path: Path,
) -> None:
    """On a full disk a log is compacted only if its live entries fit in the free space
    (with a margin); the others stay, intact, for a pass with more room."""
    core = await _interleaved(tmp_path, ledgers=4, rounds=60)
    await core.delete_ledgers([2, 3, 4])
    shares = await core.in_storage(lambda s: s.space.live_shares())
    assert shares and all(share < 0.5 for share in shares.values())
    live = {
        log: await core.in_storage(lambda s, log=log: s.space.live_bytes(log)) for log in shares
    }
    assert all(size > 0 for size in live.values())
    assert not fits(min(live.values()), ROOM_MARGIN_BYTES)
    core.compactor.room = lambda: ROOM_MARGIN_BYTES  # nothing fits: nothing is touched
    assert await core.compactor.compact(0.5) == 0
    assert await core.in_storage(lambda s: s.space.live_shares()) == shares
    core.compactor.room = lambda: ROOM_MARGIN_BYTES + max(live.values())
    assert await core.compactor.compact(0.5) == len(shares)
    assert await read_all(core, 1, 59) == {i: payload(1, i, SIZE) for i in range(60)}
    await core.close()


async def test_under_pressure_the_partly_dead_log_being_filled_is_sealed_and_compacted(
    tmp_path: Path,
) -> None:
    """On a disk smaller than one entry log every entry is in the log being filled, which
    the timed passes never compact: a pass under pressure seals it first."""
    core = await _interleaved(tmp_path, ledgers=4, rounds=60, entry_log_file_bytes=1 << 30)
    assert len(list((tmp_path / "entrylogs").glob("*.log"))) == 1
    await core.delete_ledgers([2, 3, 4])
    before = _log_bytes(tmp_path)
    assert await core.compactor.compact(0.8) == 0  # the log being filled is left alone
    assert await core.compactor.compact(0.8, seal_filling=True) == 1
    assert _log_bytes(tmp_path) < before * 0.5
    expected = {i: payload(1, i, SIZE) for i in range(60)}
    assert await read_all(core, 1, 59) == expected
    await core.close()
    core = await open_core(tmp_path)
    assert await read_all(core, 1, 59) == expected
    await core.close()

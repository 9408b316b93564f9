"""BookieCore rules: admission checks, fencing, durability, LAC long polls, checkpoints, GC."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bookie.storage.checkpoints import checkpoint_wait
from bookie.storage.entry_storage import READ_ENTRY_OVERHEAD, EntryStorage
from bookie.storage.journal_files import JournalMark, StorageIOError, journal_file
from bookie.storage.ledger_state import LedgerState
from bookie.storage.write_cache import pieces_of
from tests.unit.bookie.helpers import (
    KEY,
    OTHER_KEY,
    add,
    open_core,
    payload,
    python_journal_writer,
    read_all,
)
from walog.wire.digest import entry_digest
from walog.wire.durability import Durability
from walog.wire.status import Status

REPO = Path(__file__).resolve().parents[3]


async def test_bad_requests_are_refused(tmp_path: Path) -> None:
    core = await open_core(tmp_path, max_entry_bytes=1000)
    assert (await add(core, -1, 0))[0] is Status.BAD_REQUEST
    assert (await add(core, 1, -1, lac=-1))[0] is Status.BAD_REQUEST
    assert (await add(core, 1, 3, lac=3))[0] is Status.BAD_REQUEST
    assert (await add(core, 1, 3, lac=-2))[0] is Status.BAD_REQUEST
    assert (await add(core, 1, 0, data=b"x" * 1001))[0] is Status.ENTRY_TOO_LARGE
    assert core.ledgers() == []
    assert (await core.read(1, 0, 0))[0] is Status.NO_SUCH_LEDGER
    await core.close()


async def test_digest_mismatch_is_refused_and_nothing_stored(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    data = payload(1, 0)
    digest = entry_digest(1, 0, -1, data) ^ 1
    status, _ = await core.add(
        1, 0, -1, data, digest, KEY, recovery=False, durability=Durability.PERSISTENT
    )
    assert status is Status.DIGEST_MISMATCH
    assert core.ledgers() == []
    await core.close()


async def test_master_key_mismatch_is_unauthorized_across_reopen(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    assert (await add(core, 1, 0))[0] is Status.OK
    assert (await add(core, 1, 1, key=OTHER_KEY))[0] is Status.UNAUTHORIZED
    assert core.update_lac(1, 0, OTHER_KEY) is Status.UNAUTHORIZED
    assert (await core.fence(1, OTHER_KEY))[0] is Status.UNAUTHORIZED
    await core.abandon()
    core = await open_core(tmp_path)
    assert (await add(core, 1, 1, key=OTHER_KEY))[0] is Status.UNAUTHORIZED
    assert (await add(core, 1, 1))[0] is Status.OK
    await core.close()


async def test_fence_is_persisted_across_reopen_and_refuses_plain_adds(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(3):
        await add(core, 1, entry_id)
    assert await core.fence(1, KEY) == (Status.OK, 1, 2)
    assert (await add(core, 1, 3))[0] is Status.FENCED
    # Recovery write-backs pass the fence.
    assert (await add(core, 1, 3, recovery=True))[0] is Status.OK
    await core.abandon()
    core = await open_core(tmp_path)
    assert core.is_fenced(1)
    assert (await add(core, 1, 4))[0] is Status.FENCED
    await core.close()
    core = await open_core(tmp_path)
    assert core.is_fenced(1)
    await core.close()


async def test_fence_of_unknown_ledger_records_its_master_key(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    assert await core.fence(9, KEY) == (Status.OK, -1, -1)
    await core.abandon()
    core = await open_core(tmp_path)
    assert core.is_fenced(9)
    assert (await core.fence(9, OTHER_KEY))[0] is Status.UNAUTHORIZED
    assert (await add(core, 9, 0, recovery=True))[0] is Status.OK
    await core.close()


async def test_duplicate_add_is_ok_and_keeps_the_first_copy(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    await add(core, 1, 0, data=b"first")
    assert (await add(core, 1, 0, data=b"second"))[0] is Status.OK
    assert (await read_all(core, 1, 0)) == {0: b"first"}
    await core.checkpoint()
    assert (await add(core, 1, 0, data=b"third"))[0] is Status.OK
    assert (await read_all(core, 1, 0)) == {0: b"first"}
    assert core.stats.duplicate_adds == 2
    await core.close()


async def test_range_reads_stop_at_gaps_and_byte_limit(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    for entry_id in (0, 1, 2, 3, 5):
        await add(core, 1, entry_id, lac=-1)
    await core.checkpoint()
    await add(core, 1, 4, lac=-1)  # 4 in the write cache, the rest in entry logs
    status, records = await core.read(1, 0, 10)
    assert status is Status.OK
    assert [r.entry_id for r in records] == [0, 1, 2, 3, 4, 5]
    # Each entry counts its 64 payload bytes and READ_ENTRY_OVERHEAD.
    status, records = await core.read(1, 1, 10, max_bytes=2 * (64 + READ_ENTRY_OVERHEAD) + 1)
    assert [r.entry_id for r in records] == [1, 2]
    status, records = await core.read(1, 3, 10, max_bytes=2 * (64 + READ_ENTRY_OVERHEAD))
    assert [r.entry_id for r in records] == [3, 4]  # from an entry log, then the cache
    status, records = await core.read(1, 2, 2, max_bytes=1)
    assert [r.entry_id for r in records] == [2]
    assert (await core.read(1, 6, 9))[0] is Status.NO_SUCH_ENTRY
    assert (await core.read(1, 3, 2))[0] is Status.BAD_REQUEST
    await core.close()


async def test_a_range_of_empty_entries_is_bounded_by_their_overhead(tmp_path: Path) -> None:
    # Payload alone would let one answer hold any number of empty entries; each counts
    # READ_ENTRY_OVERHEAD, from the cache as from the entry logs.
    core = await open_core(tmp_path)
    for entry_id in range(100):
        await add(core, 1, entry_id, data=b"")
    limit = 10 * READ_ENTRY_OVERHEAD
    assert [r.entry_id for r in (await core.read(1, 0, 99, max_bytes=limit))[1]] == list(range(10))
    await core.checkpoint()
    assert [r.entry_id for r in (await core.read(1, 50, 99, max_bytes=limit))[1]] == list(
        range(50, 60)
    )
    await core.close()


async def test_volatile_sync_cursor_never_goes_backwards_across_reopen(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(10):
        await add(core, 1, entry_id, lac=-1, durability=Durability.VOLATILE)
    status, synced = await core.force(1, KEY)
    assert (status, synced) == (Status.OK, 9)
    # Entries 11..12 arrive without 10: out of order, kept as a range.
    for entry_id in (11, 12):
        await add(core, 1, entry_id, lac=-1, durability=Durability.VOLATILE)
    assert (await core.force(1, KEY))[1] == 9
    # A piggybacked LAC (entries confirmed in the ensemble) moves the cursor over the gap.
    status, synced = await add(core, 1, 13, lac=10, durability=Durability.VOLATILE)
    assert synced == 12
    await core.abandon()
    core = await open_core(tmp_path)
    assert core.last_add_synced(1) >= 13
    await core.checkpoint()
    await core.close()
    core = await open_core(tmp_path)
    assert core.last_add_synced(1) >= 13
    await core.close()


async def test_lac_long_poll_wakes_on_add_and_on_explicit_lac(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    await add(core, 1, 0)
    assert await core.wait_lac(1, -5, timeout=10) == -1
    poll = asyncio.create_task(core.wait_lac(1, -1, timeout=30))
    await asyncio.sleep(0)
    assert not poll.done()
    await add(core, 1, 1)  # piggybacks LAC 0
    assert await asyncio.wait_for(poll, 10) == 0
    poll = asyncio.create_task(core.wait_lac(1, 0, timeout=30))
    await asyncio.sleep(0)
    assert core.update_lac(1, 1, KEY) is Status.OK
    assert await asyncio.wait_for(poll, 10) == 1
    assert core.update_lac(2, 1, KEY) is Status.NO_SUCH_LEDGER
    assert await core.wait_lac(1, 1, timeout=0.05) == 1
    await core.close()
    core = await open_core(tmp_path)
    assert core.lac(1) == 1
    await core.close()


async def test_checkpoint_then_replay_gives_the_same_store_as_replay_alone(
    tmp_path: Path,
) -> None:
    async def fill(path: Path, checkpoint_every: int) -> dict[int, dict[int, bytes]]:
        core = await open_core(path, entry_log_file_bytes=8192)
        for entry_id in range(60):
            for ledger_id in (1, 2, 3):
                await add(core, ledger_id, entry_id, data=payload(ledger_id, entry_id, 100))
            if checkpoint_every and entry_id % checkpoint_every == 0:
                await core.checkpoint()
        await core.fence(2, KEY)
        core.update_lac(3, 59, KEY)
        await core.force(3, KEY)  # explicit LAC updates are not acknowledged: sync it
        await core.abandon()
        core = await open_core(path)
        view = {ledger: await read_all(core, ledger, 70) for ledger in core.ledgers()}
        facts = {n: (core.lac(n), core.last_entry_id(n), core.is_fenced(n)) for n in view}
        await core.close()
        return {**view, -1: {0: json.dumps(facts).encode()}}

    replayed = await fill(tmp_path / "a", 0)
    checkpointed = await fill(tmp_path / "b", 7)
    assert replayed == checkpointed
    assert sorted(replayed[1]) == list(range(60))


async def test_gc_reclaims_space_of_deleted_ledgers(tmp_path: Path) -> None:
    core = await open_core(tmp_path, entry_log_file_bytes=4096)
    for entry_id in range(40):
        await add(core, 1, entry_id, data=payload(1, entry_id, 500))
    for entry_id in range(5):
        await add(core, 2, entry_id, data=payload(2, entry_id, 500))
    await core.checkpoint()
    logs = tmp_path / "entrylogs"
    before = sum(p.stat().st_size for p in logs.iterdir())
    await core.delete_ledgers([1])
    after = sum(p.stat().st_size for p in logs.iterdir())
    assert core.ledgers() == [2]
    assert (await core.read(1, 0, 0))[0] is Status.NO_SUCH_LEDGER
    assert after < before / 2
    assert core.stats.entry_logs_deleted > 0
    assert sorted(await read_all(core, 2, 10)) == list(range(5))
    await core.abandon()
    core = await open_core(tmp_path)
    assert core.ledgers() == [2]
    assert sorted(await read_all(core, 2, 10)) == list(range(5))
    await core.close()


async def test_deleted_ledger_does_not_come_back_from_the_journal(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(5):
        await add(core, 1, entry_id)
    await core.delete_ledgers([1])
    await core.abandon()
    core = await open_core(tmp_path)
    assert core.ledgers() == []
    await core.close()


async def test_acknowledged_entries_survive_sigkill(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal, sys
        from pathlib import Path
        from tests.unit.bookie.helpers import add, open_core

        async def main() -> None:
            core = await open_core(Path({str(tmp_path)!r}), write_cache_bytes=20000,
                                   checkpoint_interval_s=0.05)
            for batch in range(40):
                entries = range(batch * 10, batch * 10 + 10)
                results = await asyncio.gather(*(add(core, 1, e) for e in entries))
                for entry_id, (status, _) in zip(entries, results):
                    if status.name == "OK":
                        print("ACK", entry_id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    acked = {int(line.split()[1]) for line in child.stdout.splitlines() if line.startswith("ACK ")}
    assert len(acked) == 400
    assert any((tmp_path / "entrylogs").iterdir()), "the child never checkpointed"
    core = await open_core(tmp_path)
    assert set(await read_all(core, 1, 410)) >= acked
    await core.close()


async def test_last_entry_id_after_restart_counts_only_stored_entries(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(10):
        await add(core, 1, entry_id)
    # Entries 10 and 11 arrive while the checkpoint runs: the state it stores names them,
    # but their journal records lie after its mark.
    await asyncio.gather(core.checkpoint(), add(core, 1, 10), add(core, 1, 11))
    await core.abandon()
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    mark = storage.checkpoint_mark()
    storage.close()
    # Lose everything after the mark, as if those records never reached the disk.
    os.truncate(journal_file(tmp_path / "journal", mark.file_seq), mark.offset)
    core = await open_core(tmp_path)
    assert sorted(await read_all(core, 1, 20)) == list(range(10))
    assert core.last_entry_id(1) == 9
    await core.close()


def test_index_summary_counts_entries_runs_and_the_highest_entry_per_ledger(
    tmp_path: Path,
) -> None:
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    ledgers = (1, 3, (1 << 63) - 1)
    entries = [
        (ledger_id, entry_id, (-1, 0, b"x"))
        for ledger_id in ledgers
        for entry_id in range(ledger_id % 7 + 1)
    ]
    states = {ledger_id: LedgerState(ledger_id, KEY).to_bytes() for ledger_id in ledgers}
    storage.checkpoint(pieces_of(entries), states, JournalMark(0, 0))
    # A duplicate keeps the first copy and is not counted again; a gap starts a run.
    again = [(1, 1, (-1, 0, b"y")), (1, 9, (-1, 0, b"z"))]
    storage.checkpoint(pieces_of(again), {}, JournalMark(0, 0))
    summaries = [storage.index_summary(n) for n in (0, 1, 2, 3, 4, (1 << 63) - 1)]
    assert [(s.entries, s.last, s.runs) for s in summaries] == [
        (0, -1, 0),
        (3, 9, 2),
        (0, -1, 0),
        (4, 3, 1),
        (0, -1, 0),
        (((1 << 63) - 1) % 7 + 1, ((1 << 63) - 1) % 7, 1),
    ]
    assert storage.entries_in(1, 0, 20) == {0, 1, 9}
    storage.close()


async def test_a_second_store_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    with pytest.raises(StorageIOError, match="in use by another process"):
        await open_core(tmp_path)
    await core.close()
    again = await open_core(tmp_path)
    await again.close()


async def test_failed_journal_sync_fails_the_add_and_every_later_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python_journal_writer(monkeypatch)  # its os.fdatasync is the one that fails
    core = await open_core(tmp_path)
    assert (await add(core, 1, 0))[0] is Status.OK

    def failing_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated disk failure")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    assert (await add(core, 1, 1))[0] is Status.IO_ERROR
    monkeypatch.undo()
    assert (await add(core, 1, 2))[0] is Status.IO_ERROR
    assert (await core.fence(1, KEY))[0] is Status.IO_ERROR
    await core.close()


async def test_compaction_gives_back_entry_logs_shared_with_live_ledgers(tmp_path: Path) -> None:
    core = await open_core(tmp_path, entry_log_file_bytes=8192)
    for round_no in range(12):
        for entry_id in (2 * round_no, 2 * round_no + 1):
            await add(core, 1, entry_id, data=payload(1, entry_id, 500))
        await add(core, 2, round_no, data=payload(2, round_no, 500))
        await core.checkpoint()
    logs = tmp_path / "entrylogs"
    before = sum(p.stat().st_size for p in logs.iterdir())
    await core.delete_ledgers([1])
    await core.compactor.compact(0.5)  # the logs are a third live
    assert core.stats.entry_logs_compacted > 0
    assert sum(p.stat().st_size for p in logs.iterdir()) < before / 2
    assert sorted(await read_all(core, 2, 20)) == list(range(12))
    await core.abandon()
    core = await open_core(tmp_path)
    assert sorted(await read_all(core, 2, 20)) == list(range(12))
    assert core.ledgers() == [2]
    await core.close()


async def test_replayed_deletion_drops_old_data_and_keeps_a_later_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(5):
        await add(core, 1, entry_id)
    await core.checkpoint()
    # Crash between journaling the deletion and dropping the stored data.
    monkeypatch.setattr(EntryStorage, "delete_ledgers", lambda self, ids: None)
    await core.delete_ledgers([1])
    monkeypatch.undo()
    # A writer that missed the deletion is refused; a recovery write recreates it, fenced.
    assert (await add(core, 1, 5))[0] is Status.FENCED
    await add(core, 1, 0, data=b"new", recovery=True)
    await add(core, 1, 7, lac=-1, data=b"new7", recovery=True)
    await core.abandon()
    core = await open_core(tmp_path)
    assert await read_all(core, 1, 10) == {0: b"new", 7: b"new7"}
    assert core.is_fenced(1)
    await core.checkpoint()
    await core.close()
    core = await open_core(tmp_path)
    assert await read_all(core, 1, 10) == {0: b"new", 7: b"new7"}
    await core.close()


async def test_failed_checkpoint_keeps_entries_and_the_next_one_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(10):
        await add(core, 1, entry_id)
    await core.checkpoint()
    for entry_id in range(10, 20):
        await add(core, 1, entry_id)
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated entry log failure")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageIOError, match="entry log"):
        await core.checkpoint()
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert sorted(await read_all(core, 1, 30)) == list(range(20))
    await core.checkpoint()
    assert sorted(await read_all(core, 1, 30)) == list(range(20))
    await core.abandon()
    core = await open_core(tmp_path)
    assert sorted(await read_all(core, 1, 30)) == list(range(20))
    assert core.stats.replayed_records == 0
    await core.close()


async def test_full_write_cache_starts_a_checkpoint_by_itself(tmp_path: Path) -> None:
    core = await open_core(tmp_path, write_cache_bytes=4096)
    checkpointed: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_checkpoint(written: int) -> None:
        if not checkpointed.done():
            checkpointed.set_result(written)

    core.checkpoints.listeners.append(on_checkpoint)
    for batch in range(10):
        entries = range(batch * 20, batch * 20 + 20)
        results = await asyncio.gather(*(add(core, 1, e, data=payload(1, e, 200)) for e in entries))
        assert all(status is Status.OK for status, _ in results)
    assert await asyncio.wait_for(checkpointed, 10) > 0
    assert sorted(await read_all(core, 1, 210)) == list(range(200))
    await core.close()


async def test_compaction_into_the_current_entry_log_keeps_moved_entries(tmp_path: Path) -> None:
    # Entry log 1: mostly ledger 1, a little of ledger 2. Entry log 2 (being filled):
    # only ledger 1. Deleting ledger 1 compacts log 1 into log 2, which then holds live
    # entries again and must not be dropped as "dead".
    core = await open_core(tmp_path)
    for entry_id in range(3):
        await add(core, 1, entry_id, data=payload(1, entry_id, 400))
    await add(core, 2, 0, data=payload(2, 0, 400))
    await core.close()
    core = await open_core(tmp_path)
    for entry_id in range(3, 6):
        await add(core, 1, entry_id, data=payload(1, entry_id, 400))
    await core.checkpoint()
    await core.delete_ledgers([1])
    assert await core.compactor.compact(0.5) == 1
    assert core.stats.entry_logs_compacted == 1
    assert await read_all(core, 2, 0) == {0: payload(2, 0, 400)}
    await core.close()
    core = await open_core(tmp_path)
    assert await read_all(core, 2, 0) == {0: payload(2, 0, 400)}
    await core.close()


@pytest.mark.parametrize("cache_entry_logs", [False, True])
async def test_checkpointed_entry_log_pages_are_dropped_once_synced_unless_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_entry_logs: bool
) -> None:
    advice: list[int] = []
    real_fadvise = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, what: int) -> None:
        advice.append(what)
        real_fadvise(fd, offset, length, what)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    core = await open_core(tmp_path, cache_entry_logs=cache_entry_logs)
    for entry_id in range(10):
        await add(core, 1, entry_id)
    await core.checkpoint()
    # Dropped or not, the entries are read back from the entry log.
    assert sorted(await read_all(core, 1, 20)) == list(range(10))
    await core.close()
    assert (os.POSIX_FADV_DONTNEED in advice) is not cache_entry_logs


def test_bookies_started_together_take_their_periodic_checkpoints_at_spread_times() -> None:
    firsts = [checkpoint_wait(10.0, first=True) for _ in range(500)]
    laters = [checkpoint_wait(10.0, first=False) for _ in range(500)]
    # The first checkpoint falls anywhere in the second half of the first interval, so
    # bookies started at once are spread over seconds; later ones keep to the interval.
    assert all(5.0 <= wait <= 10.0 for wait in firsts)
    assert max(firsts) - min(firsts) > 4.0
    assert all(9.0 <= wait <= 11.0 for wait in laters)
    assert max(laters) - min(laters) > 1.5

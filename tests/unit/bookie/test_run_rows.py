"""Run rows: the index holds one row per run of consecutive entries of a ledger
(bookie/storage/index.py, bookie/storage/run_index.py). A run is cut where its entries
meet others (a gap, a re-replicated copy of a damaged entry, a compaction), never lets
two copies of an entry disagree, and an index of the previous format (one row per entry)
is migrated at start and read whole.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import lmdb
import structlog

from bookie.storage.entry_log_writer import BATCH, LOG_HEADER
from bookie.storage.entry_storage import EntryStorage
from bookie.storage.index import (
    ENTRY_KEY,
    FORMAT_KEY,
    MAX_RUN_ENTRIES,
    format_payload,
    unseal,
    unseal_run_row,
)
from bookie.storage.journal_files import JournalMark
from bookie.storage.ledger_state import LedgerState
from bookie.storage.rebuild import rebuild_index
from bookie.storage.write_cache import pieces_of
from tests.unit.bookie.helpers import add, config, open_core, payload
from walog.wire.digest import entry_digest, master_key
from walog.wire.status import Status

GOLDEN_V1 = Path(__file__).resolve().parents[2] / "golden" / "v1" / "bookie"
LEDGER = 1


def _runs(path: Path, ledger_id: int) -> list[tuple[int, int]]:
    """``(first, last)`` of the ledger's run rows, read straight from the index."""
    env = lmdb.open(str(path / "index"), max_dbs=4, readonly=True, lock=False)
    try:
        entries = env.open_db(b"entries", create=False)
        runs = []
        with env.begin(db=entries) as txn:
            for key, value in txn.cursor():
                if ENTRY_KEY.unpack(bytes(key))[0] == ledger_id:
                    run = unseal_run_row(bytes(key), bytes(value))
                    assert run is not None
                    runs.append((run.first, run.last))
        return runs
    finally:
        env.close()


def _format(path: Path) -> bytes | None:
    env = lmdb.open(str(path / "index"), max_dbs=4, readonly=True, lock=False)
    try:
        meta = env.open_db(b"meta", create=False)
        with env.begin(db=meta) as txn:
            raw = txn.get(FORMAT_KEY)
        return None if raw is None else unseal(FORMAT_KEY, bytes(raw))
    finally:
        env.close()


async def _read_all(path: Path, ledger_id: int, last: int, first: int = 0) -> dict[int, bytes]:
    core = await open_core(path)
    try:
        status, records = await core.read(ledger_id, first, last)
        assert status is Status.OK
        return {r.entry_id: r.data for r in records}
    finally:
        await core.close()


async def test_one_checkpoint_stores_consecutive_entries_as_one_run_row(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    count = MAX_RUN_ENTRIES + 10
    for entry_id in [*range(count), count + 1]:  # a gap before the last
        assert (await add(core, LEDGER, entry_id, lac=-1))[0] is Status.OK
    await core.close()
    assert _runs(tmp_path, LEDGER) == [
        (0, MAX_RUN_ENTRIES - 1),
        (MAX_RUN_ENTRIES, count - 1),
        (count + 1, count + 1),
    ]
    core = await open_core(tmp_path)
    summary = core._storage.index_summary(LEDGER) if core._storage else None
    assert summary is not None and tuple(summary) == (count + 1, count + 1, 3)
    status, records = await core.read(LEDGER, 0, count + 1)
    assert status is Status.OK
    assert [r.data for r in records] == [payload(LEDGER, e) for e in range(count)]
    # A read from inside a run, and across two runs.
    status, records = await core.read(LEDGER, MAX_RUN_ENTRIES - 2, MAX_RUN_ENTRIES + 1)
    assert [r.entry_id for r in records] == [*range(MAX_RUN_ENTRIES - 2, MAX_RUN_ENTRIES + 2)]
    # The hole at ``count`` is provably absent; above the highest id too.
    assert (await core.read(LEDGER, count, count))[0] is Status.NO_SUCH_ENTRY
    assert (await core.read(LEDGER, count + 2, count + 2))[0] is Status.NO_SUCH_ENTRY
    await core.close()


async def test_a_duplicate_of_a_stored_entry_inside_a_run_keeps_the_stored_copy(
    tmp_path: Path,
) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(10):
        await add(core, LEDGER, entry_id)
    await core.checkpoint()
    status, _ = await add(core, LEDGER, 4, data=b"another copy", recovery=True)
    assert status is Status.OK
    await core.close()
    assert _runs(tmp_path, LEDGER) == [(0, 9)]
    assert (await _read_all(tmp_path, LEDGER, 9))[4] == payload(LEDGER, 4)


async def test_a_recopied_damaged_entry_inside_a_run_replaces_that_entry_only(
    tmp_path: Path,
) -> None:
    """The stored run is cut around the entry, the new copy gets a row of its own, and
    the ledger's summary still proves absence elsewhere."""
    core = await open_core(tmp_path)
    for entry_id in range(10):
        await add(core, LEDGER, entry_id, lac=-1)
    await core.close()
    (log,) = (tmp_path / "entrylogs").glob("*.log")
    raw = bytearray(log.read_bytes())
    at = raw.find(payload(LEDGER, 5))
    raw[at + 3] ^= 0x40
    log.write_bytes(bytes(raw))
    core = await open_core(tmp_path)
    assert (await core.read(LEDGER, 5, 5))[0] is Status.IO_ERROR
    status, _ = await add(core, LEDGER, 5, lac=-1, recovery=True)  # re-replicated
    assert status is Status.OK
    await core.checkpoint()
    status, records = await core.read(LEDGER, 0, 9)
    assert status is Status.OK
    assert [r.data for r in records] == [payload(LEDGER, e) for e in range(10)]
    await core.close()
    assert _runs(tmp_path, LEDGER) == [(0, 4), (5, 5), (6, 9)]
    assert await _read_all(tmp_path, LEDGER, 9) == {e: payload(LEDGER, e) for e in range(10)}
    core = await open_core(tmp_path)
    assert (await core.read(LEDGER, 10, 10))[0] is Status.NO_SUCH_ENTRY
    summary = core._storage.index_summary(LEDGER) if core._storage else None
    assert summary is not None and tuple(summary) == (10, 9, 3)
    await core.close()


async def test_an_index_of_format_2_is_migrated_at_start_and_read_whole(tmp_path: Path) -> None:
    """The golden data directory of 0.1.0 (one row per entry, index format 2): every
    entry, every fence."""
    data = tmp_path / "bookie"
    shutil.copytree(GOLDEN_V1, data, ignore=shutil.ignore_patterns("LOCK", "cookie.json"))
    assert _format(data) == format_payload(2)
    with structlog.testing.capture_logs() as logs:
        core = await open_core(data)
    try:
        migrated = [e for e in logs if e["event"] == "index migrated"]
        assert migrated and (migrated[0]["from_format"], migrated[0]["to_format"]) == (2, 3)
        for ledger_id, name, held in ((1, "closed", 20), (2, "fenced", 10), (4, "volatile", 8)):
            status, records = await core.read(ledger_id, 0, held - 1)
            assert status is Status.OK, name
            assert [r.data for r in records] == [
                b"%s entry %d" % (name.encode(), i) for i in range(held)
            ]
            assert (await core.read(ledger_id, held, held))[0] is Status.NO_SUCH_ENTRY
        assert (await add(core, 2, 10, key=master_key(b"golden")))[0] is Status.FENCED
    finally:
        await core.close()
    assert _format(data) == format_payload()
    # Once migrated, a start migrates nothing.
    with structlog.testing.capture_logs() as logs:
        core = await open_core(data)
    await core.close()
    assert not [e for e in logs if e["event"] == "index migrated"]


def _entries(ledger_id: int, ids: range) -> list[tuple[int, int, tuple[int, int, bytes]]]:
    out = []
    for entry_id in ids:
        data = payload(ledger_id, entry_id, 200)
        out.append((ledger_id, entry_id, (-1, entry_digest(ledger_id, entry_id, -1, data), data)))
    return out


def test_compaction_in_small_steps_splits_runs_and_keeps_every_entry(tmp_path: Path) -> None:
    """Each step moves part of a run: the stored run is cut, the moved part gets rows in
    the new log, the summary's run count follows and absence stays provable."""
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    try:
        states = {n: LedgerState(n, master_key(b"k")).to_bytes() for n in (1, 2)}
        both = _entries(1, range(100)) + _entries(2, range(100))
        storage.checkpoint(pieces_of(both), states, JournalMark(0, 0))
        storage.checkpoint(pieces_of(_entries(1, range(100, 120))), {}, JournalMark(0, 0))
        storage.delete_ledgers([2])
        old_log = storage.space.seal_filling_log(1.0)
        assert old_log is not None
        position, steps = None, 0
        while True:
            position, _ = storage.compact_step(old_log, position, 3000)
            steps += 1
            assert storage.entries_in(1, 0, 200) == set(range(120))
            records, damaged = storage.read_run(1, 0, 119, 1 << 30)
            assert not damaged
            assert [r.data for r in records] == [payload(1, e, 200) for e in range(120)]
            if position is None:
                break
        assert steps > 3
        assert old_log not in storage.space.live_shares()
        summary = storage.index_summary(1)
        assert (summary.entries, summary.last) == (120, 119)
        assert summary.runs >= 2
        assert storage.read_run(1, 120, 120, 1 << 20) == ([], False)  # provably absent
    finally:
        storage.close()
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    try:
        records, damaged = storage.read_run(1, 0, 119, 1 << 30)
        assert len(records) == 120 and not damaged
    finally:
        storage.close()


async def test_a_rebuilt_index_holds_one_run_row_per_run_of_entries_of_one_batch_record(
    tmp_path: Path,
) -> None:
    core = await open_core(tmp_path)
    for entry_id in [*range(10), *range(11, 14)]:
        await add(core, LEDGER, entry_id, lac=-1)
    await core.checkpoint()
    for entry_id in range(14, 16):  # the next checkpoint: a record of its own
        await add(core, LEDGER, entry_id, lac=-1)
    await core.close()
    assert _runs(tmp_path, LEDGER) == [(0, 9), (11, 13), (14, 15)]
    report = rebuild_index(config(tmp_path))
    assert report.entries == 15
    assert _runs(tmp_path, LEDGER) == [(0, 9), (11, 13), (14, 15)]
    assert await _read_all(tmp_path, LEDGER, 9) == {e: payload(LEDGER, e) for e in range(10)}
    assert await _read_all(tmp_path, LEDGER, 15, 11) == {
        e: payload(LEDGER, e) for e in range(11, 16)
    }


def test_a_checkpoint_writes_one_batch_record_per_ledger_and_one_row_per_run(
    tmp_path: Path,
) -> None:
    """Units of a ledger go into one record back to back, their bytes as they came; a
    unit with gaps (a bookie of a striped ensemble) makes a row per run."""
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    try:
        states = {n: LedgerState(n, master_key(b"k")).to_bytes() for n in (1, 2)}
        units = [
            *pieces_of(_entries(1, range(10))),
            *pieces_of(_entries(1, range(10, 25))),
            *pieces_of(_entries(2, range(0, 9, 3)) + _entries(2, range(10, 12))),
        ]
        assert storage.checkpoint(units, states, JournalMark(0, 0)) == 30
        (log,) = sorted((tmp_path / "entrylogs").glob("*.log"))
        raw = log.read_bytes()
        offset, records = LOG_HEADER.size, []
        while offset < len(raw):
            body, ledger_id, count, _ = BATCH.unpack_from(raw, offset)
            records.append((ledger_id, count))
            offset += BATCH.size + body
        assert records == [(1, 25), (2, 5)]
        assert all(unit.blob in raw for _, unit in units)
    finally:
        storage.close()
    assert _runs(tmp_path, 1) == [(0, 24)]
    assert _runs(tmp_path, 2) == [(0, 0), (3, 3), (6, 6), (10, 11)]

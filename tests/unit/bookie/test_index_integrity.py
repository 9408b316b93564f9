"""A damaged index never makes the bookie claim that an acknowledged entry is absent.

Each test damages one kind of row of a stopped bookie's LMDB index in one specific way
(value changed, row moved to another key, row lost, table lost, index rolled back) and
checks that the restarted bookie answers IO_ERROR for what it can no longer vouch for,
or refuses to start with a clear error, and still answers NO_SUCH_ENTRY where absence is
provable (so these answers stay useful to recovery).
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest

from bookie.storage.index import (
    ENTRY_KEY,
    FORMAT_KEY,
    LEDGER_KEY,
    MARK_KEY,
    TOMBSTONES_KEY,
    seal,
)
from bookie.storage.journal_files import StorageIOError
from tests.unit.bookie.helpers import KEY, add, open_core, payload
from walog.wire.status import Status

Tamper = Callable[[lmdb.Transaction, dict[str, lmdb._Database]], object]
STORED = 1  # entries 0..9 checkpointed, in two run rows: 0..4 and 5..9
FENCED = 2  # fenced, no entries
ENTRIES = 10
SECOND_RUN = 5


async def _store(path: Path, **overrides: object) -> None:
    core = await open_core(path, **overrides)
    for entry_id in range(ENTRIES):
        if entry_id == SECOND_RUN:
            await core.checkpoint()
        status, _ = await add(core, STORED, entry_id)
        assert status is Status.OK
    status, _, _ = await core.fence(FENCED, KEY)
    assert status is Status.OK
    await core.close()


def _tamper(path: Path, change: Tamper) -> None:
    env = lmdb.open(str(path / "index"), max_dbs=4, map_size=1 << 30)
    try:
        names = ("entries", "ledgers", "logs", "meta")
        tables = {name: env.open_db(name.encode(), create=False) for name in names}
        with env.begin(write=True) as txn:
            change(txn, tables)
    finally:
        env.close()


def _entry_key(ledger_id: int, entry_id: int) -> bytes:
    """The key of the run row of ``STORED`` holding ``entry_id`` (the entry's own key
    for other ledgers)."""
    if ledger_id == STORED and entry_id < ENTRIES:
        entry_id = 0 if entry_id < SECOND_RUN else SECOND_RUN
    return ENTRY_KEY.pack(ledger_id, entry_id)


def _flip(txn: lmdb.Transaction, db: lmdb._Database, key: bytes, index: int) -> None:
    value = txn.get(key, db=db)
    assert value is not None
    damaged = bytearray(value)
    damaged[index] ^= 0x01
    txn.put(key, bytes(damaged), db=db)


def _move(txn: lmdb.Transaction, db: lmdb._Database, old: bytes, new: bytes) -> None:
    value = txn.pop(old, db=db)
    assert value is not None
    txn.put(new, value, db=db)


async def _read_status(path: Path, ledger_id: int, entry_id: int) -> Status:
    core = await open_core(path)
    try:
        status, _ = await core.read(ledger_id, entry_id, entry_id)
        return status
    finally:
        await core.close()


async def test_a_damaged_entry_row_answers_io_error(tmp_path: Path) -> None:
    await _store(tmp_path)

    def change(txn: lmdb.Transaction, tables: dict[str, lmdb._Database]) -> None:
        _flip(txn, tables["entries"], _entry_key(STORED, 5), -1)  # the record length

    _tamper(tmp_path, change)
    core = await open_core(tmp_path)
    assert (await core.read(STORED, 5, 5))[0] is Status.IO_ERROR
    status, records = await core.read(STORED, 3, 9)
    assert status is Status.OK and [r.entry_id for r in records] == [3, 4]
    await core.close()


@pytest.mark.parametrize("entry_id", [0, 2, 4])
async def test_a_damaged_run_row_never_answers_no_such_entry_for_its_entries(
    tmp_path: Path, entry_id: int
) -> None:
    """Entry 2 has no row of its own: the damaged row before it may hold it."""
    await _store(tmp_path)
    _tamper(tmp_path, lambda txn, t: _flip(txn, t["entries"], _entry_key(STORED, 0), 6))
    assert await _read_status(tmp_path, STORED, entry_id) is Status.IO_ERROR


@pytest.mark.parametrize("entry_id", [5, ENTRIES - 1])
async def test_a_lost_entry_row_answers_io_error_not_no_such_entry(
    tmp_path: Path, entry_id: int
) -> None:
    await _store(tmp_path)
    _tamper(tmp_path, lambda txn, t: txn.delete(_entry_key(STORED, entry_id), db=t["entries"]))
    assert await _read_status(tmp_path, STORED, entry_id) is Status.IO_ERROR


async def test_an_entry_row_moved_within_its_ledger_answers_io_error(tmp_path: Path) -> None:
    await _store(tmp_path)
    # Same row count, but the moved row's checksum covers its old key.
    _tamper(
        tmp_path,
        lambda txn, t: _move(txn, t["entries"], _entry_key(STORED, 5), _entry_key(STORED, 261)),
    )
    core = await open_core(tmp_path)
    assert (await core.read(STORED, 5, 5))[0] is Status.IO_ERROR
    # Above the highest entry the summary names: never acknowledged here, truly absent.
    assert (await core.read(STORED, 261, 261))[0] is Status.NO_SUCH_ENTRY
    await core.close()


async def test_an_entry_row_moved_to_another_ledger_answers_io_error_for_both(
    tmp_path: Path,
) -> None:
    await _store(tmp_path)
    _tamper(
        tmp_path,
        lambda txn, t: _move(txn, t["entries"], _entry_key(STORED, 5), _entry_key(7, 5)),
    )
    core = await open_core(tmp_path)
    assert (await core.read(STORED, 5, 5))[0] is Status.IO_ERROR
    assert (await core.read(7, 5, 5))[0] is Status.IO_ERROR  # rows but no ledger row
    assert (await core.fence(7, KEY))[0] is Status.IO_ERROR
    await core.close()


async def test_a_provable_hole_below_the_highest_entry_is_no_such_entry(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    for entry_id in (0, 1, 3):  # this bookie was not asked to store entry 2
        await add(core, STORED, entry_id, lac=-1)
    await core.close()
    assert await _read_status(tmp_path, STORED, 2) is Status.NO_SUCH_ENTRY


async def test_a_damaged_ledger_row_answers_io_error_and_refuses_writes(tmp_path: Path) -> None:
    await _store(tmp_path)

    def change(txn: lmdb.Transaction, tables: dict[str, lmdb._Database]) -> None:
        _flip(txn, tables["ledgers"], LEDGER_KEY.pack(FENCED), -3)  # in the state JSON

    _tamper(tmp_path, change)
    core = await open_core(tmp_path)
    assert (await core.read(FENCED, 0, 0))[0] is Status.IO_ERROR
    assert (await core.fence(FENCED, KEY))[0] is Status.IO_ERROR
    assert (await add(core, FENCED, 0))[0] is Status.IO_ERROR  # its fence is unknown
    assert core.update_lac(FENCED, 3, KEY) is Status.IO_ERROR
    assert FENCED in core.ledgers()
    # Deleting the ledger (GC after it was deleted from the metadata) clears the damage.
    await core.delete_ledgers([FENCED])
    assert (await core.read(FENCED, 0, 0))[0] is Status.NO_SUCH_LEDGER
    await core.close()
    assert await _read_status(tmp_path, FENCED, 0) is Status.NO_SUCH_LEDGER


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda txn, t: txn.delete(LEDGER_KEY.pack(FENCED), db=t["ledgers"]),
            "do not match their census",
        ),
        (
            lambda txn, t: _move(txn, t["ledgers"], LEDGER_KEY.pack(STORED), LEDGER_KEY.pack(257)),
            "do not match their census",
        ),
        (lambda txn, t: txn.delete(MARK_KEY, db=t["meta"]), "meta row mark is missing"),
        (
            lambda txn, t: txn.put(MARK_KEY, txn.get(MARK_KEY, db=t["meta"])[:-1], db=t["meta"]),
            "meta row mark is damaged",
        ),
        (lambda txn, t: txn.delete(FORMAT_KEY, db=t["meta"]), "has no format version"),
        (
            lambda txn, t: txn.put(FORMAT_KEY, seal(FORMAT_KEY, b"another-index/1"), db=t["meta"]),
            "has format 'another-index/1'",
        ),
        (lambda txn, t: txn.drop(t["logs"], delete=True), "lacks table"),
        (
            lambda txn, t: txn.put(TOMBSTONES_KEY, seal(TOMBSTONES_KEY, b"\0"), db=t["meta"]),
            "meta row tombstones is malformed",
        ),
        (
            lambda txn, t: txn.put(TOMBSTONES_KEY, b"\0" * 20, db=t["meta"]),
            "meta row tombstones is damaged",
        ),
    ],
    ids=[
        "ledger-row-lost",
        "ledger-row-moved",
        "mark-lost",
        "mark-damaged",
        "format-missing",
        "format-other",
        "table-lost",
        "tombstones-malformed",
        "tombstones-damaged",
    ],
)
async def test_damage_that_hides_which_ledgers_exist_refuses_start(
    tmp_path: Path, change: Tamper, message: str
) -> None:
    await _store(tmp_path)
    _tamper(tmp_path, change)
    with pytest.raises(StorageIOError, match=message):
        await open_core(tmp_path)


async def test_an_index_older_than_the_journal_refuses_start(tmp_path: Path) -> None:
    store = tmp_path / "store"
    # Small journal files: the second checkpoint's mark lies in a later file, and the
    # files before it are deleted.
    await _store(store, journal_file_bytes=4096)
    old_index = tmp_path / "old-index"
    shutil.copytree(store / "index", old_index)
    core = await open_core(store, journal_file_bytes=4096)
    for entry_id in range(ENTRIES, ENTRIES + 60):
        await add(core, STORED, entry_id, data=payload(STORED, entry_id, 200))
    await core.close()
    shutil.rmtree(store / "index")
    shutil.copytree(old_index, store / "index")
    with pytest.raises(StorageIOError, match="older than the journal"):
        await open_core(store, journal_file_bytes=4096)


async def test_a_lost_index_with_entry_logs_refuses_start(tmp_path: Path) -> None:
    await _store(tmp_path)
    shutil.rmtree(tmp_path / "index")
    with pytest.raises(StorageIOError, match="the index was lost"):
        await open_core(tmp_path)


def _branch_key_offsets(data: bytes, page_size: int) -> list[int]:
    """File offsets of the 16-byte keys in LMDB branch pages (after the first node of
    each page, whose key is empty). Native little-endian page layout: pgno u64, pad u16,
    flags u16, lower u16, upper u16, then u16 node offsets; a node is lo u16, hi u16,
    flags u16, key size u16, key."""
    found: list[int] = []
    for start in range(2 * page_size, len(data), page_size):
        flags, lower = struct.unpack_from("<HH", data, start + 10)
        if flags != 0x01:  # P_BRANCH only
            continue
        for index in range(1, (lower - 16) // 2):
            (node,) = struct.unpack_from("<H", data, start + 16 + 2 * index)
            (key_size,) = struct.unpack_from("<H", data, start + node + 6)
            if key_size == ENTRY_KEY.size:
                found.append(start + node + 8)
    return found


async def test_a_damaged_branch_key_answers_io_error_not_no_such_entry(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    stored = range(0, 800, 2)  # a row each (no two consecutive)
    for entry_id in stored:  # several leaf pages under one branch page
        await add(core, STORED, entry_id, lac=-1)
    await core.close()
    index = tmp_path / "index" / "data.mdb"
    data = bytearray(index.read_bytes())
    keys = _branch_key_offsets(bytes(data), 4096)
    assert keys, "no branch page in the index"
    data[keys[0] + 7] ^= 0x75  # the separator's ledger id: searches go to the wrong leaf
    index.write_bytes(bytes(data))
    core = await open_core(tmp_path)
    statuses = [(await core.read(STORED, e, e))[0] for e in stored]
    await core.close()
    assert Status.NO_SUCH_ENTRY not in statuses
    assert Status.IO_ERROR in statuses, "the damage did not hide any entry from lookups"

"""Which entries of a ledger a bookie holds (``ListEntries``, :meth:`BookieCore.held_entries`):
ranges from the write cache and the index's run rows, never from the entry logs; a copy the
bookie found damaged, and every entry of a row that fails its checks, count as missing
until a new copy replaces them."""

from __future__ import annotations

from pathlib import Path

import lmdb

from bookie.storage.held_ranges import merged, ranges_of, without
from bookie.storage.index import ENTRY_KEY
from tests.unit.bookie.helpers import add, open_core, payload
from walog.wire.status import Status

LEDGER = 1
HELD = [0, 1, 2, 3, 4, 7, 9, 10, 11]


def test_ranges_join_what_overlaps_or_touches_and_cut_out_single_entries() -> None:
    assert merged([(9, 11), (0, 2), (3, 4), (7, 7), (1, 2), (5, 4)]) == [(0, 4), (7, 7), (9, 11)]
    assert ranges_of([11, 0, 1, 7, 1, 9, 10]) == [(0, 1), (7, 7), (9, 11)]
    assert ranges_of([]) == []
    assert without([(0, 4), (7, 7), (9, 11)], {0, 2, 7, 11, 20}) == [(1, 1), (3, 4), (9, 10)]


async def test_held_entries_come_from_the_write_cache_and_the_run_rows_alike(
    tmp_path: Path,
) -> None:
    core = await open_core(tmp_path)
    for entry_id in HELD:
        assert (await add(core, LEDGER, entry_id, lac=-1))[0] is Status.OK
    assert await core.held_entries(LEDGER, 0, 100) == (Status.OK, [(0, 4), (7, 7), (9, 11)])
    await core.checkpoint()
    assert await core.held_entries(LEDGER, 0, 100) == (Status.OK, [(0, 4), (7, 7), (9, 11)])
    await add(core, LEDGER, 5, lac=-1)  # in the cache, next to a run row
    assert await core.held_entries(LEDGER, 2, 9) == (Status.OK, [(2, 5), (7, 7), (9, 9)])
    assert await core.held_entries(LEDGER, 12, 100) == (Status.OK, [])
    assert await core.held_entries(2, 0, 100) == (Status.NO_SUCH_LEDGER, [])
    assert (await core.held_entries(LEDGER, 5, 4))[0] is Status.BAD_REQUEST
    assert (await core.held_entries(LEDGER, -1, 4))[0] is Status.BAD_REQUEST
    await core.close()


async def test_a_copy_found_damaged_is_not_held_until_a_new_copy_comes(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    for entry_id in range(10):
        await add(core, LEDGER, entry_id, lac=-1)
    await core.close()
    (log,) = (tmp_path / "entrylogs").glob("*.log")
    raw = bytearray(log.read_bytes())
    raw[raw.find(payload(LEDGER, 5)) + 3] ^= 0x40
    log.write_bytes(bytes(raw))
    core = await open_core(tmp_path)
    # The index alone cannot tell; once a read found the damage the copy counts as missing.
    assert await core.held_entries(LEDGER, 0, 9) == (Status.OK, [(0, 9)])
    assert (await core.read(LEDGER, 5, 5))[0] is Status.IO_ERROR
    assert await core.held_entries(LEDGER, 0, 9) == (Status.OK, [(0, 4), (6, 9)])
    assert (await add(core, LEDGER, 5, lac=-1, recovery=True))[0] is Status.OK
    assert await core.held_entries(LEDGER, 0, 9) == (Status.OK, [(0, 9)])
    await core.close()


async def test_an_index_row_that_fails_its_checks_holds_nothing_and_takes_new_copies(
    tmp_path: Path,
) -> None:
    core = await open_core(tmp_path)
    for entry_id in [*range(5), *range(6, 10)]:  # two run rows: 0..4 and 6..9
        await add(core, LEDGER, entry_id, lac=-1)
    await core.close()
    env = lmdb.open(str(tmp_path / "index"), max_dbs=4)
    try:
        entries = env.open_db(b"entries", create=False)
        with env.begin(db=entries, write=True) as txn:
            key = ENTRY_KEY.pack(LEDGER, 6)
            stored = txn.get(key)
            assert stored is not None
            value = bytearray(stored)
            value[-1] ^= 0x01
            txn.put(key, bytes(value))
    finally:
        env.close()
    core = await open_core(tmp_path)
    assert await core.held_entries(LEDGER, 0, 9) == (Status.OK, [(0, 4)])
    for entry_id in range(5, 10):  # what auto-recovery copies back
        assert (await add(core, LEDGER, entry_id, lac=-1, recovery=True))[0] is Status.OK
    assert await core.held_entries(LEDGER, 0, 9) == (Status.OK, [(0, 9)])
    await core.checkpoint()
    assert await core.held_entries(LEDGER, 0, 9) == (Status.OK, [(0, 9)])
    status, records = await core.read(LEDGER, 0, 9)
    assert status is Status.OK
    assert [r.data for r in records] == [payload(LEDGER, e) for e in range(10)]
    await core.close()

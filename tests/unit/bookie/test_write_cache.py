"""The write cache keeps batches as units (bookie/storage/write_cache.py): whatever order
units arrive in, however their id ranges interleave, it answers as a plain map of entries
would, and a unit's bytes are never copied on the way in."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.storage.write_cache import (
    ENTRY_OVERHEAD_BYTES,
    CachedEntry,
    WriteCache,
    pack_unit,
    unit_of_packed,
)
from walog.wire.packing import ENTRY_HEADER

Model = dict[int, dict[int, CachedEntry]]


def _entry(entry_id: int, version: int) -> tuple[int, int, int, bytes]:
    """Small entries, copied onto tails, and now and then one too large for that."""
    data = b"v%d-%d" % (version, entry_id) * (entry_id % 3)
    return entry_id, entry_id - 1, version, data + b"L" * 9000 * (entry_id % 7 == 0)


def _check(cache: WriteCache, model: Model) -> None:
    assert cache.snapshot() == {ledger: entries for ledger, entries in model.items() if entries}
    assert cache.count == sum(len(entries) for entries in model.values())
    assert cache.bytes == sum(
        len(data) + ENTRY_OVERHEAD_BYTES
        for entries in model.values()
        for _, _, data in entries.values()
    )
    for ledger_id, entries in model.items():
        assert cache.last_id(ledger_id) == max(entries, default=-1)
        for entry_id in range(-1, 42):
            assert cache.get(ledger_id, entry_id) == entries.get(entry_id)
            assert cache.contains(ledger_id, entry_id) == (entry_id in entries)
        assert cache.ids_in(ledger_id, 5, 30) == sorted(i for i in entries if 5 <= i <= 30)
        units = cache.units(ledger_id)
        assert all(a.last < b.first for a, b in itertools.pairwise(units))


batches = st.lists(
    st.tuples(st.sampled_from([1, 2]), st.lists(st.integers(0, 40), min_size=1, max_size=12)),
    max_size=12,
)


@given(batches, st.lists(st.sampled_from([1, 2]), max_size=2))
@settings(max_examples=400, deadline=None)
def test_the_cache_of_units_answers_as_a_map_of_entries_keeping_first_copies(
    adds: list[tuple[int, list[int]]], dropped: list[int]
) -> None:
    cache = WriteCache()
    model: Model = {}
    for version, (ledger_id, ids) in enumerate(adds):
        entries = [_entry(entry_id, version) for entry_id in ids]
        ledger = model.setdefault(ledger_id, {})
        fresh = {e[0] for e in entries} - ledger.keys()
        above = all(entry_id > max(ledger, default=-1) for entry_id in ids)
        for entry_id, lac, digest, data in entries:
            ledger.setdefault(entry_id, (lac, digest, data))
        if above and ids == sorted(set(ids)):  # what an add of new entries calls
            unit = pack_unit(entries)
            cache.add_packed(ledger_id, bytes(unit.blob), ids, unit.starts)
        else:
            assert cache.add(ledger_id, pack_unit(entries)) == len(fresh)
        _check(cache, model)
    for ledger_id in dropped:
        cache.drop_ledger(ledger_id)
        model.pop(ledger_id, None)
        _check(cache, model)


def test_a_large_batch_is_cached_as_the_bytes_it_came_in_and_split_by_one_inside_it() -> None:
    entries = [(i, i - 1, i, b"%d" % i * 9000) for i in (3, 5, 7, 8, 11, 12, 13, 14)]
    blob = b"".join(ENTRY_HEADER.pack(i, lac, d, len(data)) + data for i, lac, d, data in entries)
    unit = unit_of_packed(blob, [e[0] for e in entries], [len(e[3]) for e in entries])
    cache = WriteCache()
    cache.add(7, unit)
    (held,) = cache.units(7)
    assert held.blob is blob and list(held.ids) == [3, 5, 7, 8, 11, 12, 13, 14]
    assert cache.get(7, 7) == entries[2][1:]
    # An entry that falls inside the unit's range splits it; the pieces share its bytes.
    assert cache.put(7, 4, (1, 2, b"x"))
    assert not cache.put(7, 5, (1, 2, b"again"))
    assert [(u.first, u.last) for u in cache.units(7)] == [(3, 3), (4, 4), (5, 14)]
    assert cache.units(7)[0].blob is blob and cache.units(7)[2].blob is blob
    assert cache.get(7, 5) == entries[1][1:] and cache.get(7, 4) == (1, 2, b"x")


def test_small_batches_in_order_are_copied_onto_tails_that_double() -> None:
    cache = WriteCache()
    for entry_id in range(0, 300, 3):  # a bookie of a striped ensemble, one entry per add
        cache.put(1, entry_id, (entry_id - 1, entry_id, b"e%03d" % entry_id))
    cache.add(1, pack_unit([(300, 299, 0, b"a"), (301, 300, 0, b"b")]))
    units = cache.units(1)
    # A tail holds just the first entry (nothing wasted for a ledger written once), each
    # next one twice as many bytes.
    assert [len(unit.ids) for unit in units] == [1, 2, 4, 8, 16, 32, 39]
    assert all(len(unit.blob) == 28 * 2**i for i, unit in enumerate(units[:-1]))
    assert cache.get(1, 297) == (296, 297, b"e297") and cache.get(1, 298) is None
    assert cache.ids_in(1, 290, 305) == [291, 294, 297, 300, 301]

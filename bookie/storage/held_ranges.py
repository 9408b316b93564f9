"""Which entries of a ledger a bookie holds, as ranges of consecutive ids: the pure rules
of the ``ListEntries`` answer (no disk, no index).

A bookie answers from what tells it an entry is there without reading the entry: the
index's intact run rows (each already a range, bookie/storage/run_index.py) and the
entries still in memory (the write cache, and the one a checkpoint is persisting). Copies
it found damaged are left out: it cannot serve them, so they count as missing, as a read of
them would say (``IO_ERROR``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

EntryRange = tuple[int, int]
"""``(first, last)``: the entries ``first..last``, both included."""


def merged(ranges: Iterable[EntryRange]) -> list[EntryRange]:
    """The entries of ``ranges`` as ascending ranges, those that overlap or touch joined
    (empty ranges dropped)."""
    result: list[EntryRange] = []
    for first, last in sorted(r for r in ranges if r[0] <= r[1]):
        if result and first <= result[-1][1] + 1:
            if last > result[-1][1]:
                result[-1] = (result[-1][0], last)
        else:
            result.append((first, last))
    return result


def ranges_of(entry_ids: Iterable[int]) -> list[EntryRange]:
    """``entry_ids`` (any order, repeats allowed) as ascending ranges."""
    return merged((entry_id, entry_id) for entry_id in entry_ids)


def without(ranges: Iterable[EntryRange], entry_ids: Collection[int]) -> list[EntryRange]:
    """``ranges`` (ascending, disjoint) with ``entry_ids`` cut out."""
    result: list[EntryRange] = []
    for first, last in ranges:
        start = first
        for entry_id in sorted(i for i in entry_ids if first <= i <= last):
            if entry_id > start:
                result.append((start, entry_id - 1))
            start = entry_id + 1
        if start <= last:
            result.append((start, last))
    return result


__all__ = ["EntryRange", "merged", "ranges_of", "without"]

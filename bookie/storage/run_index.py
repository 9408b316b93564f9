"""Finding, adding and replacing the run rows of the index's ``entries`` table.

A run row (bookie/storage/index.py) holds the entries ``first..last`` of a ledger whose
records lie back to back in one entry log. Every operation here works on an open LMDB
transaction or cursor and leaves committing to the caller
(bookie/storage/entry_storage.py); nothing here touches an entry log.

The runs of a ledger never overlap. A new run that meets stored entries is cut: an entry
already stored keeps its stored copy (a duplicate add, a replayed record), unless the new
copy must win (a re-replicated copy of an entry whose stored copy is damaged, a
compaction moving entries): then the stored run is cut around it instead. A row that
fails its checks counts as holding its first entry only (its range is unknown); its
neighbours' reads answer IO_ERROR all the same (see :func:`find_run`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import NamedTuple

import lmdb

from bookie.storage.index import ENTRY_KEY, LEDGER_KEY, Run, run_first, run_row, unseal_run_row


class Found(NamedTuple):
    """Where a lookup of one entry ended.

    Attributes:
        run: the intact run row holding the entry, or None.
        damaged: no intact row holds it, but a row that fails its checks may: the row
            keyed with the entry itself, or the row just before it.
        exact: the row found (intact or not) is keyed with the entry itself.
    """

    run: Run | None
    damaged: bool
    exact: bool


def find_run(cursor: lmdb.Cursor, ledger_id: int, entry_id: int) -> Found:
    """The run row holding ``entry_id``: ``set_range`` on the entry's key, and one row
    back unless the row found starts with it. The cursor is left on the row found (or
    where the search ended)."""
    key = ENTRY_KEY.pack(ledger_id, entry_id)
    if cursor.set_range(key):
        found = bytes(cursor.key())
        if found == key:
            run = unseal_run_row(found, bytes(cursor.value()))
            return Found(run, run is None, True)
        present = cursor.prev()
    else:
        present = cursor.last()
    if not present:
        return Found(None, False, False)
    before = bytes(cursor.key())
    if before[:8] != LEDGER_KEY.pack(ledger_id) or before > key:
        return Found(None, False, False)
    run = unseal_run_row(before, bytes(cursor.value()))
    if run is None:
        return Found(None, True, False)
    # Keys order ids as unsigned: a negative id sorts after every run of its ledger.
    return Found(run if run.first <= entry_id <= run.last else None, False, False)


def ledger_rows_from(
    cursor: lmdb.Cursor, ledger_id: int, entry_id: int
) -> Iterator[tuple[bytes, bytes]]:
    """The ledger's rows from the one holding ``entry_id`` (or the row just before it,
    whatever it holds) on, in key order."""
    prefix = LEDGER_KEY.pack(ledger_id)
    key = ENTRY_KEY.pack(ledger_id, entry_id)
    if cursor.set_range(key):
        # One row back: it may hold the entry; if it is another ledger's, or there is
        # none, start again where the search ended.
        if bytes(cursor.key()) != key and (not cursor.prev() or bytes(cursor.key())[:8] != prefix):
            cursor.set_range(key)
    elif not cursor.last():
        return
    while True:
        found = bytes(cursor.key())
        if found[:8] != prefix:
            return
        yield found, bytes(cursor.value())
        if not cursor.next():
            return


def _rows_in(
    txn: lmdb.Transaction, db: lmdb._Database, ledger_id: int, first: int, last: int
) -> Iterator[tuple[int, Run | None]]:
    """``(first entry, run)`` of each of the ledger's rows that may hold ids in
    ``first..last``, ascending; the run is None for a row that fails its checks."""
    for key, value in ledger_rows_from(txn.cursor(db=db), ledger_id, first):
        start = run_first(key)
        if start is None:
            continue
        if start > last:
            break
        yield start, unseal_run_row(key, value)


def held_in(
    txn: lmdb.Transaction, db: lmdb._Database, ledger_id: int, first: int, last: int
) -> set[int]:
    """The ids in ``first..last`` (not negative) that a row holds (intact or not; a row
    that fails its checks holds its first entry)."""
    found: set[int] = set()
    for start, run in _rows_in(txn, db, ledger_id, first, last):
        end = start if run is None else run.last
        found.update(range(max(start, first), min(end, last) + 1))
    return found


def held_runs(
    txn: lmdb.Transaction, db: lmdb._Database, ledger_id: int, first: int, last: int
) -> tuple[list[tuple[int, int]], list[int]]:
    """``(ranges, damaged)``: the parts within ``first..last`` (not negative) of the
    ledger's intact run rows, ascending, and the first entries of its rows in that range
    that fail their checks (their range is unknown)."""
    ranges: list[tuple[int, int]] = []
    damaged: list[int] = []
    for start, run in _rows_in(txn, db, ledger_id, first, last):
        if run is None:
            if start >= first:
                damaged.append(start)
        elif run.last >= first:
            ranges.append((max(start, first), min(run.last, last)))
    return ranges, damaged


class RunChange(NamedTuple):
    """What putting runs changed in a ledger's rows (added minus removed)."""

    entries: int = 0
    runs: int = 0
    highest: int = -1


def _pieces(run: Run, dropped: Collection[int]) -> list[Run]:
    """The run without the entries ``dropped``, as runs of consecutive entries."""
    pieces: list[Run] = []
    start = None
    for entry_id in range(run.first, run.last + 2):
        keep = entry_id <= run.last and entry_id not in dropped
        if keep and start is None:
            start = entry_id
        elif not keep and start is not None:
            pieces.append(run.piece(start, entry_id - 1))
            start = None
    return pieces


def put_runs(
    txn: lmdb.Transaction,
    db: lmdb._Database,
    ledger_id: int,
    rows: list[tuple[bytes, bytes]],
    *,
    held_last: int | None,
    new_wins: Collection[int] | None,
) -> RunChange:
    """Store the ledger's new run rows ``rows`` (disjoint, as the entry-log writer built
    them), cutting them or the stored runs where they meet.

    Args:
        held_last: the highest entry id the ledger's rows hold for sure (its summary),
            or None when unknown: rows starting above it are stored as they are.
        new_wins: the ids whose new copy replaces a stored one; None: every id (a
            compaction repointing its rows). Other stored ids keep their stored copy.
    """
    runs: list[Run] = []
    for key, value in rows:
        run = unseal_run_row(key, value)
        if run is None:  # built just now: a bug, never damage
            raise ValueError(f"ledger {ledger_id}: a new run row fails its checks")
        runs.append(run)
    if not runs:
        return RunChange()
    if held_last is not None and new_wins is not None and min(r.first for r in runs) > held_last:
        txn.cursor(db=db).putmulti(rows, overwrite=False)
        return RunChange(sum(len(r.lengths) for r in runs), len(runs), max(r.last for r in runs))
    change = RunChange()
    for run in runs:
        change = _put_one(txn, db, ledger_id, run, new_wins, change)
    return change


def _put_one(
    txn: lmdb.Transaction,
    db: lmdb._Database,
    ledger_id: int,
    run: Run,
    new_wins: Collection[int] | None,
    change: RunChange,
) -> RunChange:
    entries, runs, highest = change
    dropped_new: set[int] = set()
    rewrites: list[tuple[bytes, Run | None, set[int]]] = []  # stored rows to cut
    for key, value in ledger_rows_from(txn.cursor(db=db), ledger_id, run.first):
        start = run_first(key)
        if start is None:
            continue
        if start > run.last:
            break
        stored = unseal_run_row(key, value)
        end = start if stored is None else stored.last
        overlap = range(max(start, run.first), min(end, run.last) + 1)
        if not overlap:
            continue
        won = {i for i in overlap if new_wins is None or i in new_wins}
        dropped_new.update(i for i in overlap if i not in won)
        if won:
            rewrites.append((key, stored, won))
    cursor = txn.cursor(db=db)
    for key, stored, won in rewrites:
        cursor.set_key(key)
        cursor.delete()
        runs -= 1
        entries -= len(won)
        for piece in [] if stored is None else _pieces(stored, won):
            cursor.put(*run_row(ledger_id, piece.first, piece.log_id, piece.offset, piece.lengths))
            runs += 1
    for piece in _pieces(run, dropped_new):
        cursor.put(*run_row(ledger_id, piece.first, piece.log_id, piece.offset, piece.lengths))
        runs += 1
        entries += len(piece.lengths)
        highest = max(highest, piece.last)
    return RunChange(entries, runs, highest)


__all__ = ["Found", "RunChange", "find_run", "held_in", "ledger_rows_from", "put_runs"]

"""How far a reader trails the log (walog.log.lag): the pure count."""

from __future__ import annotations

import pytest

from walog.log.lag import ReaderLag, entries_behind, last_entries
from walog.log.log_metadata import LedgerInfo
from walog.log.position import Position


def test_a_readers_lag_counts_every_confirmed_entry_from_its_position() -> None:
    ledgers = (
        LedgerInfo(3, "CLOSED", 9, ctime=1.0),
        LedgerInfo(5, "CLOSED", -1, ctime=1.0),
        LedgerInfo(8, ctime=1.0),
    )
    assert entries_behind(ledgers, None, {8: 4}) == 15
    assert entries_behind(ledgers, Position(3, 7, 2), {8: 4}) == 3 + 5
    assert entries_behind(ledgers, Position(3, 10, 0), {8: 4}) == 5
    assert entries_behind(ledgers, Position(8, 5, 0), {8: 4}) == 0
    assert entries_behind(ledgers, Position(8, 0, 0), {}) == 0  # no LAC known: empty
    assert ReaderLag(Position(8, 5, 0), 0).caught_up


def test_the_last_n_records_lie_in_the_last_n_confirmed_entries() -> None:
    ledgers = (
        LedgerInfo(3, "CLOSED", 9, ctime=1.0),
        LedgerInfo(5, "CLOSED", -1, ctime=1.0),
        LedgerInfo(8, ctime=1.0),
    )
    last = Position(8, 4, 0)
    assert last_entries(ledgers, {8: 4}, 1) == (Position(8, 4, 0), last)
    assert last_entries(ledgers, {8: 4}, 5) == (Position(8, 0, 0), last)
    # Across the empty ledger 5 into ledger 3.
    assert last_entries(ledgers, {8: 4}, 7) == (Position(3, 8, 0), last)
    # More than the log holds: from its first entry.
    assert last_entries(ledgers, {8: 4}, 100) == (Position(3, 0, 0), last)
    # No LAC known for the open ledger: the log ends in ledger 3.
    assert last_entries(ledgers, {}, 2) == (Position(3, 8, 0), Position(3, 9, 0))
    assert last_entries((LedgerInfo(8, ctime=1.0),), {}, 3) is None
    with pytest.raises(ValueError, match="at least 1"):
        last_entries(ledgers, {8: 4}, 0)

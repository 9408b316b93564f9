"""How far a reader trails the log (walog.log.lag): the pure count."""

from __future__ import annotations

from walog.log.lag import ReaderLag, entries_behind
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

"""Which ledgers a new writer or a sink's commit fences, and how their recovery is listed."""

from __future__ import annotations

from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.takeover import to_fence, with_recovered


def _closed(ledger_id: int) -> LedgerInfo:
    return LedgerInfo(ledger_id, "CLOSED", 4)


def test_a_takeover_fences_the_last_two_ledgers_even_when_listed_closed() -> None:
    meta = LogMetadata(ledgers=(_closed(1), _closed(2), _closed(3), LedgerInfo(4)))
    assert [i.ledger_id for i in to_fence(meta)] == [3, 4]


def test_a_takeover_fences_every_earlier_ledger_the_list_shows_open() -> None:
    # A writer that could not close ledger 2 on a roll, nor recover it, left it OPEN.
    meta = LogMetadata(ledgers=(_closed(1), LedgerInfo(2), _closed(3), _closed(5), LedgerInfo(6)))
    assert [i.ledger_id for i in to_fence(meta)] == [2, 5, 6]


def test_a_log_of_one_or_no_ledger_fences_what_there_is() -> None:
    assert to_fence(LogMetadata()) == []
    assert [i.ledger_id for i in to_fence(LogMetadata(ledgers=(LedgerInfo(7),)))] == [7]


def test_recovered_ledgers_replace_the_listed_ones_and_empty_ones_leave_for_deletion() -> None:
    meta = LogMetadata(ledgers=(LedgerInfo(2), _closed(3), LedgerInfo(6)), pending_deletion=(1,))
    recovered = {2: LedgerInfo(2).closed(8, None, 1.0), 6: LedgerInfo(6).closed(-1, None, 1.0)}
    new = with_recovered(meta, recovered)
    assert new.ledger_ids == [2, 3] and new.pending_deletion == (1, 6)
    assert new.ledgers[0].is_closed and new.ledgers[0].last_entry_id == 8
    assert new.epoch == meta.epoch  # the caller bumps it in the same CAS

"""Which ledgers a lost CAS may have left behind (pure)."""

from __future__ import annotations

from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.truncation import orphan_candidates


def test_orphan_candidates_are_unlisted_ids_below_the_newest_listed_ledger() -> None:
    meta = LogMetadata(
        ledgers=(LedgerInfo(5), LedgerInfo(9)), pending_deletion=(3,), orphans_scanned_below=2
    )
    # 1: below the watermark; 3: pending; 5, 9: listed; 10, 11: may still be CAS'd in.
    assert orphan_candidates([1, 2, 3, 4, 5, 6, 8, 9, 10, 11], meta) == [2, 4, 6, 8]


def test_an_empty_log_has_no_orphan_candidates() -> None:
    assert orphan_candidates([1, 2, 3], LogMetadata()) == []

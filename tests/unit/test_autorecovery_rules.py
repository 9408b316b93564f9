"""Auto-recovery rules (walog/autorecovery/rules.py): which shares of which fragments a
pass checks on the bookies that are available."""

from __future__ import annotations

from walog.autorecovery.rules import shares_to_check
from walog.metadata.layout import LedgerMetadata

ENSEMBLES = ((0, ("a", "b", "c")), (10, ("a", "d", "c")), (20, ("e", "d", "c")))


def _metadata(state: str, last_entry_id: int) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=7,
        ensemble_size=3,
        write_quorum=3,
        ack_quorum=2,
        state=state,  # type: ignore[arg-type]
        last_entry_id=last_entry_id,
        ensembles=ENSEMBLES,
    )


def test_every_fragment_of_a_closed_ledger_is_checked_on_its_available_bookies() -> None:
    checked = shares_to_check(_metadata("CLOSED", 25), available={"a", "c", "e"})
    assert [(d.fragment, d.first, d.last, d.lost) for d in checked] == [
        (0, 0, 9, (0, 2)),
        (1, 10, 19, (0, 2)),
        (2, 20, 25, (0, 2)),
    ]


def test_an_open_ledgers_last_fragment_and_empty_fragments_are_not_checked() -> None:
    assert [d.fragment for d in shares_to_check(_metadata("OPEN", -1), {"a", "d"})] == [0, 1]
    # Closed at entry 19: the last fragment holds no entry.
    assert [d.fragment for d in shares_to_check(_metadata("CLOSED", 19), {"c"})] == [0, 1]

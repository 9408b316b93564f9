"""Auto-recovery rules (walog/autorecovery/rules.py): which shares of which fragments a
pass checks on the bookies that are available, and which answers show a copy missing."""

from __future__ import annotations

import random

from walog import mutations
from walog.autorecovery.rules import (
    copy_missing,
    entries_missing,
    entries_to_verify,
    shares_to_check,
)
from walog.metadata.layout import LedgerMetadata
from walog.wire.status import Status

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


def test_a_check_reads_the_first_and_last_entry_of_a_share_and_a_random_part_of_the_rest() -> None:
    share = list(range(0, 60, 3))  # every third entry: 20 of them
    rng = random.Random(7)
    assert entries_to_verify(share, 0, rng) == [0, 57]
    assert entries_to_verify(share, 100, rng) == share
    sampled = entries_to_verify(share, 25, rng)  # 25 % of the 18 between, rounded up: 5
    assert len(sampled) == 7 and sampled[0] == 0 and sampled[-1] == 57
    assert sampled == sorted(set(sampled)) and set(sampled) <= set(share)
    assert {tuple(entries_to_verify(share, 25, rng)) for _ in range(20)} != {tuple(sampled)}


def test_a_check_of_a_share_of_one_entry_or_none_reads_what_there_is() -> None:
    rng = random.Random(7)
    assert entries_to_verify([5], 50, rng) == [5]
    assert entries_to_verify([], 50, rng) == []


def test_every_entry_of_a_share_outside_the_bookies_listed_ranges_is_missing() -> None:
    share = list(range(1, 40, 3))  # 1, 4, ..., 37: one index's share under E=3, Qw=1
    held = ((0, 4), (13, 13), (20, 30), (37, 50))
    assert entries_missing(share, Status.OK, held) == [7, 10, 16, 19, 31, 34]
    assert entries_missing(share, Status.OK, ((0, 100),)) == []
    assert entries_missing(share, Status.OK, ()) == share
    assert entries_missing([], Status.OK, held) == []


def test_an_entry_list_that_shows_no_ledger_or_an_unreadable_index_misses_the_whole_share() -> None:
    share = [2, 5, 8]
    assert entries_missing(share, Status.NO_SUCH_LEDGER, ()) == share
    assert entries_missing(share, Status.IO_ERROR, ()) == share
    assert entries_missing(share, Status.BAD_REQUEST, ()) == []  # tells nothing


def test_verify_counts_an_unreadable_copy_as_missing() -> None:
    assert copy_missing(Status.IO_ERROR)
    assert copy_missing(Status.NO_SUCH_ENTRY)
    assert copy_missing(Status.NO_SUCH_LEDGER)
    held = set(Status) - {Status.IO_ERROR, Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER}
    assert [status for status in held if copy_missing(status)] == []


def test_with_verify_counts_unreadable_as_held_an_unreadable_copy_is_held() -> None:
    """The planted bug: a copy its bookie cannot read is never replaced."""
    with mutations.enabled_mutations("verify_counts_unreadable_as_held"):
        assert not copy_missing(Status.IO_ERROR)

"""The GC rule: delete only ledgers stored here, absent from metadata, and not written
within the grace period."""

from __future__ import annotations

from bookie.gc import collectable, is_stray
from walog.metadata.layout import LedgerMetadata, LedgerState


def test_ledgers_present_in_metadata_are_never_collected() -> None:
    assert collectable([1, 2, 3], [1, 2, 3], {}, now=1000.0, started=0.0, grace=0.0) == []


def test_ledgers_absent_from_metadata_are_collected_after_the_grace_period() -> None:
    assert collectable([1, 2, 3], [2], {}, now=1000.0, started=0.0, grace=60.0) == [1, 3]


def test_recently_written_ledgers_are_kept_even_without_metadata() -> None:
    last_write = {1: 990.0, 3: 100.0}
    assert collectable([1, 3], [], last_write, now=1000.0, started=0.0, grace=60.0) == [3]


def test_nothing_is_collected_within_grace_of_the_bookie_start() -> None:
    # Writes before the start are unknown: the start time stands in for them.
    assert collectable([1, 2], [], {}, now=1030.0, started=1000.0, grace=60.0) == []
    assert collectable([1, 2], [], {}, now=1061.0, started=1000.0, grace=60.0) == [1, 2]


def _metadata(state: LedgerState, *ensembles: tuple[int, tuple[str, ...]]) -> LedgerMetadata:
    return LedgerMetadata(7, 2, 2, 2, state, 9, tuple(ensembles))


def test_a_copy_is_stray_when_the_closed_ledgers_ensembles_never_name_the_bookie() -> None:
    assert is_stray(_metadata("CLOSED", (0, ("a", "b")), (5, ("a", "c"))), "d")


def test_a_copy_named_by_any_fragment_is_not_stray() -> None:
    closed = _metadata("CLOSED", (0, ("a", "d")), (5, ("a", "c")))
    assert not is_stray(closed, "d")
    assert not is_stray(closed, "c")


def test_copies_of_open_ledgers_are_never_stray() -> None:
    # An open ledger's ensembles may still change (a writer's ensemble change, recovery).
    assert not is_stray(_metadata("OPEN", (0, ("a", "b"))), "d")
    assert not is_stray(_metadata("IN_RECOVERY", (0, ("a", "b"))), "d")

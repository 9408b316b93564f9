"""The GC rule: delete only ledgers stored here, absent from metadata, and not written
within the grace period."""

from __future__ import annotations

from bookie.gc import collectable


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

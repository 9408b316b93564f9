"""Sync cursor rules of seed 004 and the ledger state record (pure, no I/O)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bookie.storage.ledger_state import LedgerState, SyncCursor


def test_in_order_sync_advances_last_add_synced() -> None:
    cursor = SyncCursor()
    for entry_id in range(5):
        cursor.mark_synced(entry_id)
    assert cursor.last_add_synced == 4
    assert cursor.ranges == []


def test_out_of_order_sync_is_kept_as_a_range_until_the_gap_fills() -> None:
    cursor = SyncCursor()
    cursor.mark_synced(0)
    cursor.mark_synced(2)
    cursor.mark_synced(3)
    cursor.mark_synced(5)
    assert cursor.last_add_synced == 0
    assert cursor.ranges == [(2, 3), (5, 5)]
    cursor.mark_synced(1)
    assert cursor.last_add_synced == 3
    assert cursor.ranges == [(5, 5)]


def test_piggybacked_lac_above_cursor_moves_it_and_absorbs_ranges() -> None:
    cursor = SyncCursor()
    cursor.mark_synced(7)
    cursor.mark_synced(8)
    cursor.advance_to(5)
    assert cursor.last_add_synced == 5
    cursor.advance_to(6)
    assert cursor.last_add_synced == 8
    assert cursor.ranges == []


def test_lac_below_cursor_does_not_move_it_back() -> None:
    cursor = SyncCursor(10)
    cursor.advance_to(3)
    cursor.mark_synced(2)
    assert cursor.last_add_synced == 10


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("sync"), st.integers(0, 40)),
            st.tuples(st.just("lac"), st.integers(-1, 40)),
        ),
        max_size=60,
    )
)
def test_cursor_matches_a_set_model_and_never_goes_backwards(
    steps: list[tuple[str, int]],
) -> None:
    cursor = SyncCursor()
    synced: set[int] = set()
    floor = -1
    for kind, value in steps:
        before = cursor.last_add_synced
        if kind == "sync":
            cursor.mark_synced(value)
            synced.add(value)
        else:
            cursor.advance_to(value)
            floor = max(floor, value)
        expected = floor
        while expected + 1 in synced:
            expected += 1
        assert cursor.last_add_synced == expected
        assert cursor.last_add_synced >= before
        in_ranges = {e for first, last in cursor.ranges for e in range(first, last + 1)}
        assert in_ranges == {e for e in synced if e > expected}
        restored = SyncCursor(cursor.last_add_synced, [list(r) for r in cursor.ranges])
        assert restored.ranges == cursor.ranges


def test_state_record_round_trips() -> None:
    state = LedgerState(7, b"k" * 32, fenced=True, lac=4, last_entry_id=9)
    state.sync.mark_synced(0)
    state.sync.mark_synced(3)
    again = LedgerState.from_bytes(7, state.to_bytes())
    assert again.master_key == state.master_key
    assert (again.fenced, again.lac, again.last_entry_id) == (True, 4, 9)
    assert again.last_add_synced == 0
    assert again.sync.ranges == [(3, 3)]

"""Pure planning rules of the Spark data source (no Spark, no bookies)."""

from __future__ import annotations

import pytest

from walog.errors import DataLossError
from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.position import Position
from walog.spark.archive import archivable
from walog.spark.options import ReadOptions
from walog.spark.plan import (
    ORIGIN,
    LedgerSpan,
    LogSnapshot,
    ReadRange,
    advance_by_records,
    check_start,
    parse_bound,
    plan_ranges,
)
from walog.spark.stream import offset_of, position_of

SNAP = LogSnapshot(
    (LedgerSpan(3, 9, True), LedgerSpan(4, -1, True), LedgerSpan(7, 4, False)),
    truncated_through=Position(2, 5, 0),
)


def test_partitions_follow_ledgers_and_split_long_ones() -> None:
    ranges = plan_ranges(SNAP, SNAP.earliest, SNAP.latest, max_entries=4)
    assert [(r.ledger_id, r.first_entry, r.last_entry) for r in ranges] == [
        (3, 0, 3),
        (3, 4, 7),
        (3, 8, 9),
        (7, 0, 3),
        (7, 4, 4),
    ]


def test_open_ledger_is_read_up_to_the_planned_lac() -> None:
    assert SNAP.latest == Position(7, 5, 0)
    ranges = plan_ranges(SNAP, ORIGIN, SNAP.latest)
    assert ranges[-1].last_entry == 4 and not ranges[-1].closed


def test_bounds_inside_an_entry_keep_only_the_slots_between() -> None:
    start, end = Position(3, 2, 1), Position(7, 1, 2)
    ranges = plan_ranges(SNAP, start, end)
    assert [(r.ledger_id, r.first_entry, r.last_entry) for r in ranges] == [(3, 2, 9), (7, 0, 1)]
    first, last = ranges[0], ranges[-1]
    assert not first.keeps(Position(3, 2, 0)) and first.keeps(Position(3, 2, 1))
    assert last.keeps(Position(7, 1, 1)) and not last.keeps(Position(7, 1, 2))


def test_end_at_slot_zero_excludes_its_entry() -> None:
    ranges = plan_ranges(SNAP, ORIGIN, Position(3, 5, 0))
    assert [(r.first_entry, r.last_entry) for r in ranges] == [(0, 4)]


def test_empty_bounds_plan_nothing() -> None:
    assert plan_ranges(SNAP, SNAP.latest, SNAP.latest) == []
    assert plan_ranges(LogSnapshot(()), ORIGIN, ORIGIN) == []


def test_truncated_start_raises_or_skips_to_first_survivor() -> None:
    with pytest.raises(DataLossError, match="truncated"):
        check_start(SNAP, Position(2, 0, 0), fail_on_data_loss=True)
    assert check_start(SNAP, Position(2, 0, 0), fail_on_data_loss=False) == Position(3, 0, 0)
    # At or after the truncation mark nothing was lost.
    assert check_start(SNAP, Position(2, 5, 0), fail_on_data_loss=True) == Position(2, 5, 0)


def test_read_limit_ends_inside_an_entry() -> None:
    counts = [(3, 0, 3), (3, 1, 3), (7, 0, 2)]
    assert advance_by_records(counts, Position(3, 0, 1), 3) == Position(3, 1, 1)
    assert advance_by_records(counts, Position(3, 0, 0), 6) == Position(7, 0, 0)
    assert advance_by_records(counts, Position(3, 0, 0), 8) is None


def test_options_are_checked_with_one_clear_error() -> None:
    opts = ReadOptions.parse(
        {
            "metadata": "sqlite:///x.db",
            "log": "l",
            "startPosition": "1:2:3",
            "maxrecordspertrigger": "5",
        }
    )
    assert opts.start == Position(1, 2, 3) and opts.max_records_per_trigger == 5
    with pytest.raises(ValueError, match="option 'log'"):
        ReadOptions.parse({"metadata": "sqlite:///x.db"})
    with pytest.raises(ValueError, match="startPosition"):
        ReadOptions.parse({"metadata": "m", "log": "l", "startPosition": "1:2"})
    with pytest.raises(ValueError, match="maxEntriesPerPartition"):
        ReadOptions.parse({"metadata": "m", "log": "l", "maxEntriesPerPartition": "0"})
    with pytest.raises(ValueError, match="failOnDataLoss"):
        ReadOptions.parse({"metadata": "m", "log": "l", "failOnDataLoss": "maybe"})
    assert parse_bound(" Latest ", "endPosition") == "latest"


def test_offsets_round_trip_positions() -> None:
    assert position_of(offset_of(Position(4, 5, 6))) == Position(4, 5, 6)
    with pytest.raises(ValueError, match="not a walog offset"):
        position_of({"x": "1"})


def test_ranges_pickle_for_executors() -> None:
    import pickle

    rng = ReadRange(3, 0, 9, ORIGIN, Position(3, 10, 0), True)
    assert pickle.loads(pickle.dumps(rng)) == rng


def test_archive_takes_closed_unarchived_ledgers_up_to_the_first_open_one() -> None:
    meta = LogMetadata(
        ledgers=(
            LedgerInfo(1, "CLOSED", 4),
            LedgerInfo(2, "CLOSED", 4),
            LedgerInfo(3, "OPEN"),
            LedgerInfo(4, "CLOSED", 1),
        ),
        archived_through=Position(1, 5, 0),
    )
    assert archivable(meta) == [2]
    assert archivable(meta.replace(archived_through=None)) == [1, 2]

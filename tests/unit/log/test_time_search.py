"""The search for the first record at or after a time (walog.log.time_search), pure."""

from __future__ import annotations

import collections
import datetime
import json
import random
from collections.abc import Sequence

import pytest

from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.position import Position
from walog.log.takeover import stamp_floor
from walog.log.time_search import Need, Span, micros, read_bound, search, timestamp_argument

Log = dict[Need, list[int]]


def _log(rng: random.Random, ledgers: int) -> tuple[list[Span], Log]:
    """Ledgers of random sizes with non-decreasing timestamps (ties included); about half
    of them with their time range recorded."""
    stamps: Log = {}
    spans = []
    now = 1_000_000
    for ledger_id in range(1, ledgers + 1):
        entries = rng.choice([1, 1, 2, 3, 7, 8, 9, 33, 100])
        for entry_id in range(entries):
            records = []
            for _ in range(rng.choice([1, 1, 2, 5])):
                now += rng.choice([0, 0, 1, 3, 100])
                records.append(now)
            stamps[(ledger_id, entry_id)] = records
        first, last = stamps[(ledger_id, 0)][0], stamps[(ledger_id, entries - 1)][-1]
        times = (first, last) if rng.random() < 0.5 else None
        spans.append(Span(ledger_id, entries - 1, times))
    return spans, stamps


def _expected(t: int, stamps: Log) -> Position | None:
    for (ledger_id, entry_id), records in sorted(stamps.items()):
        for slot, stamp in enumerate(records):
            if stamp >= t:
                return Position(ledger_id, entry_id, slot)
    return None


def _drive(t: int, spans: Sequence[Span], stamps: Log) -> tuple[Position | None, list[Need]]:
    reads: list[Need] = []
    steps = search(t, spans)
    try:
        need = next(steps)
        while True:
            reads.append(need)
            need = steps.send(stamps[need])
    except StopIteration as stop:
        return stop.value, reads


def test_position_at_reads_at_most_log2_entries_plus_two_per_ledger() -> None:
    rng = random.Random(7)
    for _ in range(40):
        spans, stamps = _log(rng, rng.randint(1, 60))
        entries = {span.ledger_id: span.last_entry_id + 1 for span in spans}
        low = min(s[0] for s in stamps.values()) - 5
        high = max(s[-1] for s in stamps.values()) + 5
        for _ in range(50):
            t = rng.randint(low, high)
            found, reads = _drive(t, spans, stamps)
            assert found == _expected(t, stamps), (t, spans)
            assert len(reads) == len(set(reads)), f"an entry read twice: {reads}"
            per_ledger = collections.Counter(ledger_id for ledger_id, _ in reads)
            for ledger_id, count in per_ledger.items():
                assert count <= read_bound(entries[ledger_id]), (ledger_id, count, reads)


def test_position_at_past_every_record_is_none() -> None:
    spans, stamps = _log(random.Random(1), 5)
    last = max(s[-1] for s in stamps.values())
    assert _drive(last + 1, spans, stamps)[0] is None
    assert _drive(0, [], {})[0] is None


def test_a_ledger_whose_recorded_range_starts_at_or_after_t_is_not_read() -> None:
    spans = [Span(1, 9, (10, 20)), Span(2, 99, (30, 40))]
    found, reads = _drive(25, spans, {})
    assert found == Position(2, 0, 0)
    assert reads == []


def test_ledgers_with_recorded_ranges_cost_no_read_to_pass() -> None:
    spans = [Span(i, 1000, (i * 100, i * 100 + 50)) for i in range(1, 1001)]
    stamps: Log = {(700, e): [70_000 + e // 20] for e in range(1001)}
    found, reads = _drive(70_010, spans, stamps)
    assert found == Position(700, 200, 0)
    assert {ledger_id for ledger_id, _ in reads} == {700}
    assert len(reads) <= read_bound(1001)


def test_read_bound_is_ceil_log2_plus_two() -> None:
    assert [read_bound(n) for n in (1, 2, 3, 4, 5, 1024, 1025)] == [2, 3, 4, 4, 5, 12, 13]


def test_timestamps_compare_at_microsecond_resolution() -> None:
    assert micros(1.0000004) == 1_000_000
    assert micros(1.7e9 + 0.1234565) == round((1.7e9 + 0.1234565) * 1e6)


def test_a_naive_datetime_is_refused_naming_what_is_accepted() -> None:
    with pytest.raises(ValueError, match="naive datetime; give one with a time zone"):
        timestamp_argument(datetime.datetime(2026, 1, 1), "at")
    with pytest.raises(TypeError, match=r"seconds since the epoch .* or a datetime"):
        timestamp_argument("10m", "at")
    with pytest.raises(TypeError):
        timestamp_argument(True, "at")
    with pytest.raises(ValueError, match="finite"):
        timestamp_argument(float("nan"), "at")
    aware = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert timestamp_argument(aware) == aware.timestamp()
    assert timestamp_argument(5) == 5.0


def test_ledger_time_ranges_round_trip_beside_the_list() -> None:
    meta = LogMetadata(
        ledgers=(
            LedgerInfo(3, "CLOSED", 4, ctime=1.0, first_timestamp=10.5, last_timestamp=12.0),
            LedgerInfo(5, "CLOSED", 2, ctime=1.0),
            LedgerInfo(9, ctime=3.0),
        )
    )
    raw = meta.to_json()
    doc = json.loads(raw)
    # Releases that do not know the ranges refuse unknown keys in a ledger's item.
    assert all(set(item) <= {f for f in _OLD_LEDGER_KEYS} for item in doc["ledgers"])
    assert doc["ledger_times"] == {"3": [10.5, 12.0]}
    again = LogMetadata.from_json(raw)
    assert again == meta
    assert again.ledgers[0].time_range == (10.5, 12.0)
    assert again.ledgers[1].time_range is None


_OLD_LEDGER_KEYS = ("ledger_id", "state", "last_entry_id", "ctime", "closed_at", "size_bytes")


def test_a_record_without_ledger_times_reads_as_ranges_unknown() -> None:
    old = {
        "format": 1,
        "epoch": 2,
        "ledgers": [{"ledger_id": 3, "state": "CLOSED", "last_entry_id": 4, "ctime": 1.0}],
    }
    meta = LogMetadata.from_json(json.dumps(old).encode())
    assert meta.ledgers[0].time_range is None
    assert "ledger_times" not in json.loads(meta.to_json())


def test_a_time_range_that_does_not_parse_is_left_out() -> None:
    doc = {
        "format": 1,
        "ledgers": [
            {"ledger_id": 3, "state": "CLOSED", "last_entry_id": 4},
            {"ledger_id": 4, "state": "CLOSED", "last_entry_id": 4},
        ],
        "ledger_times": {"3": [1.0, "x"], "4": [2.0, 3.0], "x": [1, 2]},
    }
    meta = LogMetadata.from_json(json.dumps(doc).encode())
    assert [i.time_range for i in meta.ledgers] == [None, (2.0, 3.0)]
    assert not meta.damaged


def test_a_new_writer_stamps_from_the_last_closed_records_timestamp() -> None:
    ranged = LedgerInfo(3, "CLOSED", 4, first_timestamp=1.0, last_timestamp=2.0)
    unranged = LedgerInfo(4, "CLOSED", 7)
    empty = LedgerInfo(5, "CLOSED", -1)
    assert stamp_floor(LogMetadata(ledgers=(ranged, empty, LedgerInfo(6)))) == (2.0, None)
    assert stamp_floor(LogMetadata(ledgers=(ranged, unranged, LedgerInfo(6)))) == (
        None,
        unranged,
    )
    assert stamp_floor(LogMetadata(ledgers=(empty, LedgerInfo(6)))) == (None, None)

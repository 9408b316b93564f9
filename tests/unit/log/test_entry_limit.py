"""The rules of a log's record size limit (walog.log.entry_limit): the check at open, and
the packing again of records a bookie refused as too large."""

from __future__ import annotations

from walog.errors import RecordTooLargeError
from walog.log.entry_limit import entry_limit_problem, record_too_large, repack
from walog.log.records import HEADER_BYTES, RECORD_OVERHEAD_BYTES, decode_records


def test_a_log_limit_within_the_clients_and_every_bookies_is_accepted() -> None:
    assert entry_limit_problem("l", 100, 100, {"b1:1": 100, "b2:1": 200}) is None
    assert entry_limit_problem("l", 100, 100, {}) is None  # no bookie announces one


def test_a_log_limit_over_the_clients_is_refused_naming_both_and_the_fix() -> None:
    problem = entry_limit_problem("l", 200, 100, {})
    assert problem is not None
    assert "max_entry_bytes=200" in problem and "ClientConfig.max_entry_bytes=100" in problem
    assert "walog log config l --set max_entry_bytes=N" in problem


def test_a_log_limit_over_a_bookies_names_the_smallest_bookie() -> None:
    problem = entry_limit_problem("l", 200, 500, {"b1:1": 150, "b2:1": 100, "b3:1": 300})
    assert problem is not None
    assert "bookie b2:1 stores at most 100" in problem and "1 other" in problem


def test_a_record_too_large_names_its_size_and_the_largest_record() -> None:
    error = record_too_large("l", 5000, 4096)
    assert isinstance(error, ValueError) and error.size == 5000
    assert error.limit is not None and error.limit < 4096
    assert "record of 5000 bytes" in str(error) and f"{error.limit} bytes" in str(error)


def _records(sizes: list[int]) -> list[tuple[float, bytes, int]]:
    """Records of the given payload sizes, each with its index as companion."""
    return [(float(i), bytes([i % 256]) * size, i) for i, size in enumerate(sizes)]


def test_records_packed_again_keep_their_order_and_only_one_too_large_alone_fails() -> None:
    limit = HEADER_BYTES + 2 * (RECORD_OVERHEAD_BYTES + 10)  # two records of 10 bytes
    records = _records([10, 10, 10, limit, 5, 5, 5])
    repacked = repack(records, limit, 100)
    assert repacked.too_large == [(limit, 3)]
    # The records either side of the failed one may share an entry: their order holds.
    assert [companions for _entry, _size, companions in repacked.entries] == [
        [0, 1],
        [2, 4],
        [5, 6],
    ]
    for entry, size, companions in repacked.entries:
        assert size == len(entry) <= limit
        # Each record keeps its timestamp and payload.
        assert decode_records(entry) == [records[i][:2] for i in companions]


def test_records_packed_again_respect_the_records_per_entry_limit() -> None:
    repacked = repack(_records([1] * 5), 1000, 2)
    assert [companions for _e, _s, companions in repacked.entries] == [[0, 1], [2, 3], [4]]
    assert repacked.too_large == []


def test_a_record_that_fills_an_entry_alone_is_packed_not_failed() -> None:
    limit = 100
    largest = limit - HEADER_BYTES - RECORD_OVERHEAD_BYTES
    repacked = repack(_records([largest, largest + 1]), limit, 10)
    assert [companions for _e, _s, companions in repacked.entries] == [[0]]
    assert repacked.too_large == [(largest + 1, 1)]
    assert repack([], limit, 10).entries == []


def test_a_record_too_large_after_a_bookies_refusal_names_the_refusal() -> None:
    refusal = RecordTooLargeError("bookie b:1 refused entry 3", size=900, limit=500)
    error = record_too_large("l", 600, 500, refusal=refusal)
    assert error.size == 600 and error.limit == 500 - HEADER_BYTES - RECORD_OVERHEAD_BYTES
    assert "bookie b:1 refused entry 3" in str(error) and error.__cause__ is refusal

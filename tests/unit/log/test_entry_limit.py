"""The rule a log's writer checks its record size limit with at open (walog.log.entry_limit)."""

from __future__ import annotations

from walog.log.entry_limit import entry_limit_problem, record_too_large


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

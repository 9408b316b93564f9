"""Roll and retention decisions (pure)."""

from __future__ import annotations

import pytest

from walog.log.log_metadata import LedgerInfo
from walog.log.position import Position
from walog.log.retention import RetentionPolicy, RollPolicy, retention_count, truncation_count


def closed(lid: int, last: int, *, at: float = 0.0, size: int | None = 10) -> LedgerInfo:
    return LedgerInfo(lid, "CLOSED", last, ctime=at, closed_at=at, size_bytes=size)


def test_roll_when_any_limit_is_reached() -> None:
    policy = RollPolicy(max_entries=10, max_bytes=100, max_age=5.0)
    assert not policy.should_roll(entries=9, size_bytes=99, age=4.9)
    assert policy.should_roll(entries=10, size_bytes=0, age=0)
    assert policy.should_roll(entries=1, size_bytes=100, age=0)
    assert policy.should_roll(entries=1, size_bytes=0, age=5.0)


def test_empty_ledger_is_never_rolled() -> None:
    assert not RollPolicy(max_age=1.0).should_roll(entries=0, size_bytes=0, age=100)
    assert not RollPolicy().enabled and not RollPolicy().should_roll(
        entries=10**9, size_bytes=10**12, age=1e9
    )


@pytest.mark.parametrize("bad", [0, -1, True])
def test_policies_refuse_non_positive_limits(bad: int) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        RollPolicy(max_entries=bad)
    with pytest.raises(ValueError, match="max_age"):
        RetentionPolicy(max_age=bad)


def test_truncation_takes_whole_ledgers_wholly_before_the_position() -> None:
    ledgers = [closed(1, 9), closed(2, 4), closed(3, 7), LedgerInfo(4)]
    assert truncation_count(ledgers, Position(1, 9, 3)) == 0
    assert truncation_count(ledgers, Position(1, 10, 0)) == 1
    assert truncation_count(ledgers, Position(3, 0, 0)) == 2
    assert truncation_count(ledgers, Position(3, 7, 0)) == 2


def test_truncation_never_takes_the_last_or_an_open_ledger() -> None:
    assert truncation_count([closed(1, 3), closed(2, 3)], Position(99, 0, 0)) == 1
    assert truncation_count([closed(1, 3), LedgerInfo(2), LedgerInfo(3)], Position(9, 0, 0)) == 1
    assert truncation_count([LedgerInfo(1)], Position(9, 0, 0)) == 0


def test_retention_by_age_from_close_time() -> None:
    ledgers = [closed(1, 3, at=0), closed(2, 3, at=50), closed(3, 3, at=90), LedgerInfo(4)]
    policy = RetentionPolicy(max_age=20)
    assert retention_count(ledgers, policy, now=100, archived_through=None) == 2
    assert retention_count(ledgers, policy, now=60, archived_through=None) == 1


def test_retention_by_size_keeps_total_under_the_limit() -> None:
    ledgers = [closed(1, 3, size=40), closed(2, 3, size=40), closed(3, 3, size=40), LedgerInfo(4)]
    policy = RetentionPolicy(max_bytes=50)
    assert retention_count(ledgers, policy, now=0, archived_through=None) == 2
    assert (
        retention_count(ledgers, RetentionPolicy(max_bytes=120), now=0, archived_through=None) == 0
    )


def test_retention_requires_archive_mark_when_asked() -> None:
    ledgers = [closed(1, 3), closed(2, 3), LedgerInfo(3)]
    policy = RetentionPolicy(max_age=1, require_archived=True)
    assert retention_count(ledgers, policy, now=100, archived_through=None) == 0
    assert retention_count(ledgers, policy, now=100, archived_through=Position(1, 3, 5)) == 0
    assert retention_count(ledgers, policy, now=100, archived_through=Position(1, 4, 0)) == 1
    assert retention_count(ledgers, policy, now=100, archived_through=Position(3, 0, 0)) == 2


def test_retention_never_passes_a_cursor() -> None:
    ledgers = [closed(1, 3), closed(2, 3), LedgerInfo(3)]
    policy = RetentionPolicy(max_age=1)
    cursors = {"slow": Position(2, 1, 0), "fast": Position(3, 0, 0)}
    assert retention_count(ledgers, policy, now=100, archived_through=None, cursors=cursors) == 1
    assert (
        retention_count(
            ledgers, policy, now=100, archived_through=None, cursors={"x": Position(1, 0, 0)}
        )
        == 0
    )


def test_default_retention_deletes_nothing() -> None:
    ledgers = [closed(1, 3), closed(2, 3), LedgerInfo(3)]
    assert retention_count(ledgers, RetentionPolicy(), now=1e12, archived_through=None) == 0

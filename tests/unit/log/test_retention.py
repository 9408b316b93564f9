"""Roll and retention decisions (pure)."""

from __future__ import annotations

import pytest

from walog.log.log_metadata import LedgerInfo
from walog.log.position import Position
from walog.log.retention import (
    RetentionPolicy,
    RollPolicy,
    retention_count,
    retention_decision,
    truncation_count,
)


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


def test_retention_passes_a_subscription_only_past_its_backlog_bytes_limit() -> None:
    # Four closed ledgers of 10 bytes each and the open one; "slow" has read nothing.
    ledgers = [closed(i, 3) for i in (1, 2, 3, 4)] + [LedgerInfo(5)]
    subs = {"slow": Position(1, 0, 0), "fast": Position(5, 0, 0)}
    within = RetentionPolicy(max_age=1, backlog_limit_bytes=40)
    kept = retention_decision(ledgers, within, now=100, archived_through=None, subscriptions=subs)
    assert kept.count == 0 and kept.overrun == {}
    over = RetentionPolicy(max_age=1, backlog_limit_bytes=25)
    passed = retention_decision(ledgers, over, now=100, archived_through=None, subscriptions=subs)
    # 40 bytes behind: deleting two ledgers brings its backlog to 20, within the limit.
    assert passed.count == 2 and passed.overrun == {"slow": 40}


def test_retention_passes_a_subscription_only_past_its_backlog_age_limit() -> None:
    ledgers = [closed(1, 3, at=10), closed(2, 3, at=80), LedgerInfo(3)]
    subs = {"slow": Position(1, 2, 0)}
    policy = RetentionPolicy(max_age=5, backlog_limit_s=50)
    decision = retention_decision(
        ledgers, policy, now=100, archived_through=None, subscriptions=subs
    )
    # Ledger 1 closed 90 s ago (over the limit), ledger 2 20 s ago (within it).
    assert decision.count == 1 and decision.overrun == {"slow": 20}


def test_retention_never_passes_a_snapshot_whatever_the_backlog_limit() -> None:
    ledgers = [closed(1, 3), closed(2, 3), LedgerInfo(3)]
    policy = RetentionPolicy(max_age=1, backlog_limit_bytes=1, backlog_limit_s=1)
    decision = retention_decision(
        ledgers, policy, now=100, archived_through=None, holds=[Position(1, 0, 0)]
    )
    assert decision.count == 0


def test_a_backlog_limit_deletes_only_what_the_policy_retires() -> None:
    ledgers = [closed(1, 3, at=99), closed(2, 3, at=99), LedgerInfo(3)]
    subs = {"slow": Position(1, 0, 0)}
    policy = RetentionPolicy(max_age=50, backlog_limit_bytes=1)
    decision = retention_decision(
        ledgers, policy, now=100, archived_through=None, subscriptions=subs
    )
    assert decision.count == 0 and decision.overrun == {}


@pytest.mark.parametrize("field", ["backlog_limit_bytes", "backlog_limit_s"])
def test_backlog_limits_refuse_non_positive_values(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RetentionPolicy(**{field: 0})  # type: ignore[arg-type]

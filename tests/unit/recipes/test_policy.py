"""The pure rules of the state-machine recipe."""

from __future__ import annotations

import pytest

from walog.log.log_metadata import LogMetadata, SnapshotInfo
from walog.log.position import Position
from walog.recipes.policy import (
    Role,
    SnapshotPolicy,
    caught_up,
    is_new,
    next_after,
    restore_order,
    truncation_point,
    with_snapshot,
)


def snap(ledger: int, entry: int, slot: int = 0) -> SnapshotInfo:
    return SnapshotInfo(
        position=Position(ledger, entry, slot),
        ledger_id=100 + ledger,
        path=None,
        size_bytes=3,
        checksum="sha256:00",
        created_at=1.0,
        node="a",
    )


def test_no_limit_means_no_snapshot() -> None:
    policy = SnapshotPolicy()
    assert not policy.enabled
    assert not policy.due(records=10**9, size_bytes=10**12, age=1e9)


def test_a_snapshot_is_due_when_any_limit_is_reached_and_never_with_nothing_new() -> None:
    policy = SnapshotPolicy(every_records=10, every_bytes=100, every_seconds=5.0)
    assert policy.due(records=10, size_bytes=0, age=0)
    assert policy.due(records=1, size_bytes=100, age=0)
    assert policy.due(records=1, size_bytes=0, age=5.0)
    assert not policy.due(records=9, size_bytes=99, age=4.9)
    assert not policy.due(records=0, size_bytes=0, age=1e9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every_records": 0}, "every_records"),
        ({"every_bytes": -1}, "every_bytes"),
        ({"every_seconds": True}, "every_seconds"),
        ({"keep": 0}, "keep"),
        ({"taken_by": "nobody"}, "taken_by"),
    ],
)
def test_bad_snapshot_policy_is_refused_naming_the_field(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SnapshotPolicy(**kwargs)  # type: ignore[arg-type]


def test_snapshots_are_taken_only_in_the_configured_roles() -> None:
    leader_only = SnapshotPolicy(every_records=1, taken_by="leader")
    assert leader_only.takes_on(Role.LEADER)
    assert not leader_only.takes_on(Role.STANDBY)
    assert not SnapshotPolicy(taken_by="standby").takes_on(Role.LEADER)
    assert not SnapshotPolicy().takes_on(Role.CATCHING_UP)


def test_a_record_is_applied_only_at_or_after_the_resume_point() -> None:
    assert is_new(None, Position(1, 0, 0))
    resume = next_after(Position(3, 4, 1))
    assert resume == Position(3, 4, 2)
    assert not is_new(resume, Position(3, 4, 1))
    assert not is_new(resume, Position(2, 9, 9))
    assert is_new(resume, Position(3, 4, 2))
    assert is_new(resume, Position(3, 5, 0))
    assert is_new(resume, Position(4, 0, 0))


def test_a_new_snapshot_drops_the_oldest_beyond_keep() -> None:
    kept, dropped = with_snapshot((snap(1, 5), snap(2, 3)), snap(3, 0), keep=2) or ((), ())
    assert [s.position for s in kept] == [Position(2, 3, 0), Position(3, 0, 0)]
    assert [s.position for s in dropped] == [Position(1, 5, 0)]


def test_a_snapshot_no_newer_than_the_listed_ones_is_not_listed() -> None:
    assert with_snapshot((snap(2, 3),), snap(2, 3), keep=2) is None
    assert with_snapshot((snap(2, 3),), snap(1, 9), keep=2) is None
    assert with_snapshot((), snap(1, 0), keep=1) == ((snap(1, 0),), ())


def test_truncation_stops_at_the_oldest_kept_snapshot() -> None:
    assert truncation_point(()) is None
    assert truncation_point((snap(2, 3), snap(4, 0))) == Position(2, 3, 0)


def test_restore_tries_the_newest_snapshot_first() -> None:
    order = restore_order((snap(1, 0), snap(3, 0), snap(2, 0)))
    assert [s.position.ledger_id for s in order] == [3, 2, 1]


def test_a_new_leader_serves_only_once_it_reached_its_own_ledger() -> None:
    target = Position(9, 0, 0)
    assert not caught_up(None, None, target)
    assert not caught_up(Position(7, 3, 0), Position(8, 12, 0), target)
    assert caught_up(Position(7, 3, 0), Position(9, 0, 0), target)
    assert caught_up(Position(9, 0, 0), None, target)


def test_log_metadata_round_trips_snapshots_and_reads_records_without_them() -> None:
    meta = LogMetadata(snapshots=(snap(1, 2), snap(3, 4, 1)))
    assert LogMetadata.from_json(meta.to_json()) == meta
    old = LogMetadata().to_json()
    assert b"snapshots" not in old
    assert LogMetadata.from_json(old).snapshots == ()


def test_a_snapshot_record_missing_a_field_is_set_aside_as_damaged() -> None:
    raw = LogMetadata(snapshots=(snap(1, 2),)).to_json().replace(b'"checksum"', b'"x"')
    meta = LogMetadata.from_json(raw)
    # Never restored from, and it holds retention back until repaired (walog.log.damaged).
    assert meta.snapshots == ()
    assert [d.name for d in meta.damaged] == ["snapshots['0']"]
    assert meta.damage_holding_data == list(meta.damaged)

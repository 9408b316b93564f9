"""Recipes built on walog logs.

``StateMachine`` / ``AsyncStateMachine``: a replicated service whose state is rebuilt from
its log, with a leader, warm standbys, snapshots and truncation by snapshot (see
docs/statemachine.md).

- ``policy``     pure rules: roles, snapshot policy, kept snapshots, truncation point
- ``service``    what a service supplies (apply, snapshot, restore)
- ``snapshots``  where snapshot bytes live (ledgers or a directory), checksums, listing
- ``keeper``     a node's snapshots: when, take + list + truncate, restore the newest
- ``commands``   the leader's commands in flight, applied in append order once acked
- ``results``    the first results of commands of client sessions, for their retries
- ``machine``    the asyncio driver: standby -> campaign -> catch up -> lead
- ``reads``      reads of a node's state: linearizable (after the log's read barrier) or stale
- ``sync``       the sync facade on the client's event loop thread
"""

from __future__ import annotations

from walog.recipes.machine import AsyncStateMachine
from walog.recipes.policy import Role, SnapshotPolicy
from walog.recipes.service import (
    CommandAppliedError,
    CommandInDoubtError,
    NotLeaderError,
    Service,
)
from walog.recipes.snapshots import (
    CorruptSnapshotError,
    DirectorySnapshotStore,
    LedgerSnapshotStore,
)
from walog.recipes.sync import StateMachine

__all__ = [
    "AsyncStateMachine",
    "CommandAppliedError",
    "CommandInDoubtError",
    "CorruptSnapshotError",
    "DirectorySnapshotStore",
    "LedgerSnapshotStore",
    "NotLeaderError",
    "Role",
    "Service",
    "SnapshotPolicy",
    "StateMachine",
]

"""What a log looks like to an operator: its size, its age, what its retention waits for and
how far its archive lags (``walog maintain``'s metrics and ``walog status``).

Pure: computed from the log's metadata record, its settings and "now"; nothing is read
from the bookies (a ledger of unknown size counts as unmeasured, not as 0 bytes).
"""

from __future__ import annotations

import dataclasses

from walog.log.log_config import LogConfig
from walog.log.log_metadata import LogMetadata
from walog.log.position import Position, ledger_end
from walog.log.retention import retention_count
from walog.log.retention_runner import deletes_anything


@dataclasses.dataclass(frozen=True)
class LogHealth:
    """One log's figures.

    Attributes:
        name: the log.
        ledgers: ledgers in its list.
        size_bytes: entry bytes of its closed ledgers of known size.
        unmeasured_ledgers: closed ledgers whose size is not known yet.
        oldest_record_age_s: seconds since its oldest ledger was created (its oldest record
            is no older); None for a log without ledgers.
        retention_waiting_for: what keeps retention from deleting the oldest ledger, in
            words (``"nothing: 2 ledger(s) due now"`` when it would delete some).
        retention_reason: the same as one word, a metric's label: ``none`` (no retention
            policy), ``due``, ``writing``, ``open``, ``archive``, ``cursor``, ``snapshot``,
            ``age``, ``size``, ``empty``.
        archive_lag_ledgers: closed ledgers not archived yet.
        archive_lag_s: seconds since the oldest of those was closed (0 when none).
    """

    name: str
    ledgers: int
    size_bytes: int
    unmeasured_ledgers: int
    oldest_record_age_s: float | None
    retention_waiting_for: str
    retention_reason: str
    archive_lag_ledgers: int
    archive_lag_s: float


def _waiting_for(meta: LogMetadata, config: LogConfig, now: float) -> tuple[str, str]:
    policy = config.retention
    if not deletes_anything(policy):
        return "none", "nothing: no retention limit is set"
    if not meta.ledgers:
        return "empty", "nothing: the log has no ledgers"
    marks = [
        *((f"cursor {name!r} at {at}", "cursor", at) for name, at in meta.cursors.items()),
        *((f"snapshot at {snap.position}", "snapshot", snap.position) for snap in meta.snapshots),
    ]
    due = retention_count(
        meta.ledgers,
        policy,
        now=now,
        archived_through=meta.archived_through,
        cursors=[at for _, _, at in marks],
    )
    if due:
        return "due", f"nothing: {due} ledger(s) due now"
    head = meta.ledgers[0]
    if len(meta.ledgers) == 1:
        return "writing", f"ledger {head.ledger_id} is the one being written"
    if not head.is_closed:
        return "open", f"ledger {head.ledger_id} is not closed yet"
    end = ledger_end(head.ledger_id, head.last_entry_id)
    through = meta.archived_through
    if policy.require_archived and (through is None or through < end):
        return "archive", f"ledger {head.ledger_id} is not archived yet"
    for text, reason, at in marks:
        if at < end:
            return reason, f"{text} (before the end of ledger {head.ledger_id})"
    if policy.max_age is not None:
        closed_at = head.closed_at if head.closed_at is not None else head.ctime
        left = max(0.0, policy.max_age - (now - closed_at))
        return "age", f"ledger {head.ledger_id} reaches max_age in {left:.0f} s"
    return "size", f"the log's closed ledgers hold no more than max_bytes={policy.max_bytes}"


def _unarchived(meta: LogMetadata, through: Position | None) -> list[float]:
    """When each closed, not yet archived ledger was closed."""
    out = []
    for info in meta.ledgers:
        if not info.is_closed:
            continue
        if through is not None and ledger_end(info.ledger_id, info.last_entry_id) <= through:
            continue
        out.append(info.closed_at if info.closed_at is not None else info.ctime)
    return out


def log_health(name: str, meta: LogMetadata, config: LogConfig, now: float) -> LogHealth:
    """The figures of log ``name`` from its record ``meta`` and settings ``config``."""
    closed = [info for info in meta.ledgers if info.is_closed]
    reason, text = _waiting_for(meta, config, now)
    pending = _unarchived(meta, meta.archived_through)
    return LogHealth(
        name=name,
        ledgers=len(meta.ledgers),
        size_bytes=sum(info.size_bytes or 0 for info in closed),
        unmeasured_ledgers=sum(1 for info in closed if info.size_bytes is None),
        oldest_record_age_s=max(0.0, now - meta.ledgers[0].ctime) if meta.ledgers else None,
        retention_waiting_for=text,
        retention_reason=reason,
        archive_lag_ledgers=len(pending),
        archive_lag_s=max(0.0, now - min(pending)) if pending else 0.0,
    )


__all__ = ["LogHealth", "log_health"]

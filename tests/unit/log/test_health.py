"""A log's figures for operators: what retention waits for, archive lag, size and age."""

from __future__ import annotations

from walog.log.health import log_health
from walog.log.log_config import LogConfig
from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.position import Position
from walog.log.retention import RetentionPolicy

NOW = 10_000.0


def _closed(ledger_id: int, closed_at: float, size: int | None = 100) -> LedgerInfo:
    return LedgerInfo(
        ledger_id, "CLOSED", 4, ctime=closed_at - 10, closed_at=closed_at, size_bytes=size
    )


def _meta(**changes: object) -> LogMetadata:
    ledgers = (_closed(1, 1000.0), _closed(2, 2000.0, None), LedgerInfo(3, ctime=2000.0))
    return LogMetadata(ledgers=ledgers).replace(**changes)


def _config(**retention: object) -> LogConfig:
    return LogConfig(retention=RetentionPolicy(**retention))  # type: ignore[arg-type]


def test_health_says_what_retention_waits_for() -> None:
    assert log_health("l", _meta(), LogConfig(), NOW).retention_reason == "none"
    due = log_health("l", _meta(), _config(max_age=10.0), NOW)
    assert (due.retention_reason, due.retention_waiting_for) == (
        "due",
        "nothing: 2 ledger(s) due now",
    )
    young = log_health("l", _meta(), _config(max_age=9500.0), NOW)
    assert young.retention_reason == "age"
    assert young.retention_waiting_for == "ledger 1 reaches max_age in 500 s"
    archive = log_health("l", _meta(), _config(max_age=1.0, require_archived=True), NOW)
    assert archive.retention_reason == "archive"
    cursor = _meta(cursors={"billing": Position(1, 2, 0)})
    held = log_health("l", cursor, _config(max_age=1.0), NOW)
    assert held.retention_reason == "cursor" and "'billing' at 1:2:0" in held.retention_waiting_for
    alone = LogMetadata(ledgers=(LedgerInfo(3, ctime=2000.0),))
    assert log_health("l", alone, _config(max_age=1.0), NOW).retention_reason == "writing"


def test_health_measures_size_age_and_archive_lag() -> None:
    health = log_health("l", _meta(archived_through=Position(1, 5, 0)), LogConfig(), NOW)
    assert (health.ledgers, health.size_bytes, health.unmeasured_ledgers) == (3, 100, 1)
    assert health.oldest_record_age_s == NOW - 990.0
    assert (health.archive_lag_ledgers, health.archive_lag_s) == (1, NOW - 2000.0)
    empty = log_health("l", LogMetadata(), LogConfig(), NOW)
    assert empty.oldest_record_age_s is None and empty.archive_lag_ledgers == 0

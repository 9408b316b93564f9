"""The stored log configuration: its JSON, its keys, and how a process's settings meet it."""

from __future__ import annotations

import pytest

from walog.log.log_config import (
    DEFAULT_CONFIG,
    ArchivePolicy,
    LogConfig,
    config_keys,
    effective_config,
    given_settings,
    resolve,
)
from walog.log.log_metadata import LogMetadata
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.wire.durability import Durability


def test_config_round_trips_through_the_log_record() -> None:
    config = LogConfig(
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=1,
        durability=Durability.VOLATILE,
        max_entry_bytes=4 << 20,
        roll=RollPolicy(max_entries=10, max_age=60.0),
        retention=RetentionPolicy(max_age=3600.0, require_archived=True),
        archive=ArchivePolicy(to="/data/archive", interval_s=600.0),
    )
    meta = LogMetadata(config=config.to_doc())
    assert effective_config(LogMetadata.from_json(meta.to_json())) == config


def test_a_record_without_config_reads_as_the_defaults() -> None:
    old = LogMetadata.from_json(b'{"format": 1, "epoch": 2, "ledgers": []}')
    assert old.config is None
    assert effective_config(old) == DEFAULT_CONFIG == LogConfig()
    assert b'"config"' not in LogMetadata().to_json()


def test_settings_change_from_text_by_key() -> None:
    config = DEFAULT_CONFIG.with_settings(
        {
            "retention.max_age": "7200",
            "retention.require_archived": "true",
            "roll.max_bytes": "1048576",
            "durability": "volatile",
            "archive.to": "/srv/arch",
        }
    )
    assert config.retention == RetentionPolicy(max_age=7200.0, require_archived=True)
    assert config.roll.max_bytes == 1 << 20
    assert config.durability is Durability.VOLATILE
    assert config.archive.to == "/srv/arch"
    assert config.with_settings({"retention.max_age": "none"}).retention.max_age is None
    assert set(config_keys()) >= {"ensemble_size", "retention.max_bytes", "archive.interval_s"}


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"retention.max_agee": "1"}, "retention.max_agee"),
        ({"retention.max_age": "soon"}, "retention.max_age"),
        ({"retention.max_age": "-5"}, "retention.max_age"),
        ({"retention.require_archived": "maybe"}, "retention.require_archived"),
        ({"ensemble_size": "none"}, "ensemble_size"),
        ({"durability": "eventually"}, "durability"),
        ({"ack_quorum": "4"}, "ack_quorum"),
        ({"archive.to": "s3://bucket/x"}, "archive.to"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(changes: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        DEFAULT_CONFIG.with_settings(changes)


def test_quorums_go_through_the_one_quorum_check() -> None:
    with pytest.raises(ValueError, match="ensemble_size >= write_quorum >= ack_quorum >= 1"):
        LogConfig(ensemble_size=2, write_quorum=3, ack_quorum=2)


def test_a_process_passing_other_settings_than_stored_gets_one_error_naming_them() -> None:
    stored = LogConfig(retention=RetentionPolicy(max_age=3600.0))
    same = given_settings(retention=RetentionPolicy(max_age=3600))
    assert resolve("orders", stored, same) == stored
    assert resolve("orders", stored, {}) == stored
    other = given_settings(retention=RetentionPolicy(max_age=60.0), ensemble_size=3)
    with pytest.raises(ValueError) as caught:
        resolve("orders", stored, other)
    message = str(caught.value)
    assert "retention.max_age: stored 3600.0, given 60.0" in message
    assert "ensemble_size" not in message  # given, but equal to the stored
    assert "\n" not in message and "walog log config orders --set" in message
    assert resolve("orders", stored, other, override=True).retention.max_age == 60.0


def test_a_log_without_stored_config_uses_what_the_process_gives() -> None:
    given = given_settings(ensemble_size=1, write_quorum=1, ack_quorum=1)
    assert resolve("old", None, given).ensemble_size == 1

"""Ledger metadata records: JSON round trip and the fragment that holds an entry."""

from __future__ import annotations

import json

from walog.metadata.layout import (
    LedgerMetadata,
    bookie_path,
    cookie_path,
    ledger_path,
    log_path,
)
from walog.wire.durability import Durability


def _metadata() -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=42,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        state="CLOSED",
        last_entry_id=250,
        ensembles=((0, ("b1:1", "b2:1", "b3:1")), (100, ("b1:1", "b4:1", "b3:1"))),
        durability=Durability.VOLATILE,
        custom_metadata={"app": "kv"},
        password_check="abc",
        ctime=1700000000.5,
    )


def test_json_round_trip_keeps_every_field() -> None:
    original = _metadata()
    assert LedgerMetadata.from_json(original.to_json()) == original


def test_json_is_versioned_and_readable() -> None:
    doc = json.loads(_metadata().to_json())
    assert doc["format"] == 1
    assert doc["durability"] == "VOLATILE"
    assert doc["ensembles"][1] == [100, ["b1:1", "b4:1", "b3:1"]]


def test_defaults_round_trip() -> None:
    fresh = LedgerMetadata(ledger_id=1, ensemble_size=1, write_quorum=1, ack_quorum=1)
    again = LedgerMetadata.from_json(fresh.to_json())
    assert again == fresh
    assert again.state == "OPEN" and again.last_entry_id == -1 and not again.is_closed


def test_ensemble_for_picks_the_fragment_holding_the_entry() -> None:
    meta = _metadata()
    assert meta.ensemble_for(0) == ("b1:1", "b2:1", "b3:1")
    assert meta.ensemble_for(99) == ("b1:1", "b2:1", "b3:1")
    assert meta.ensemble_for(100) == ("b1:1", "b4:1", "b3:1")
    assert meta.ensemble_for(10_000) == meta.last_ensemble


def test_fragment_bounds_close_each_fragment_before_the_next() -> None:
    assert _metadata().fragment_bounds() == [
        (0, 99, ("b1:1", "b2:1", "b3:1")),
        (100, -1, ("b1:1", "b4:1", "b3:1")),
    ]


def test_with_changes_copies() -> None:
    meta = _metadata()
    reopened = meta.with_changes(state="OPEN", last_entry_id=-1)
    assert reopened.state == "OPEN" and meta.state == "CLOSED"


def test_paths() -> None:
    assert ledger_path(7) == "/ledgers/7"
    assert log_path("orders") == "/logs/orders"
    assert bookie_path("127.0.0.1:3181") == "/bookies/available/127.0.0.1:3181"
    assert cookie_path("127.0.0.1:3181") == "/bookies/cookies/127.0.0.1:3181"

"""One home per bookie setting: settings of the storage engine reach the bookie's flags
with their own default."""

from __future__ import annotations

from pathlib import Path

from bookie.main import parse_config
from bookie.storage.config import StorageConfig
from walog.config import ClientConfig
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES

BASE = ["--data-dir", "/d", "--listen", "127.0.0.1:3181", "--metadata", "sqlite:///m.db"]


def test_a_bookie_from_flags_accepts_a_little_more_than_a_client_sends() -> None:
    config, _ = parse_config(BASE)
    client_largest = ClientConfig().max_entry_bytes
    assert client_largest == DEFAULT_MAX_ENTRY_BYTES
    assert config.max_entry_bytes > client_largest
    assert config.storage_config().max_entry_bytes == StorageConfig(Path("/d")).max_entry_bytes

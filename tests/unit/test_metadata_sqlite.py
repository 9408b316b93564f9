"""SQLite store specifics: the heartbeat runs in its own thread, the file's schema and modes."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path

import pytest

from walog.errors import MetadataError
from walog.metadata import open_store

SESSION_S = 1.0


async def test_heartbeat_keeps_registration_while_event_loop_is_blocked(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path}/meta.db?session_timeout={SESSION_S}"
    owner = await open_store(uri)
    watcher = await open_store(uri)
    try:
        await owner.register("/live/busy", b"")
        time.sleep(3 * SESSION_S)  # noqa: ASYNC251 - blocks the loop on purpose
        assert await watcher.exists("/live/busy") == 0
    finally:
        await owner.close()
        await watcher.close()
    assert all_released(tmp_path / "meta.db")


def all_released(db: Path) -> bool:
    """No liveness rows or sessions are left behind once every store has closed."""
    with sqlite3.connect(db) as conn:
        owned = conn.execute("SELECT COUNT(*) FROM nodes WHERE owner IS NOT NULL").fetchone()
        sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
    return bool(owned[0] == 0 and sessions[0] == 0)


async def test_database_uses_wal_and_survives_reopen(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path}/meta.db"
    store = await open_store(uri)
    await store.create("/kept", b"data")
    first = await store.next_id("ids")
    await store.close()
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = await open_store(uri)
    try:
        assert await again.get("/kept") == (b"data", 0)
        assert await again.next_id("ids") == first + 1
    finally:
        await again.close()


async def test_a_new_database_file_and_its_journal_are_created_0600(tmp_path: Path) -> None:
    old_umask = os.umask(0o002)  # a umask that would leave the file group-writable
    try:
        store = await open_store(f"sqlite://{tmp_path}/meta.db")
        await store.create("/x", b"1")
    finally:
        os.umask(old_umask)
    try:
        for name in ("meta.db", "meta.db-wal", "meta.db-shm"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    finally:
        await store.close()


async def test_a_database_file_others_can_write_is_refused(tmp_path: Path) -> None:
    store = await open_store(f"sqlite://{tmp_path}/meta.db")
    await store.close()
    (tmp_path / "meta.db").chmod(0o666)
    with pytest.raises(MetadataError, match=r"writable by its group \(mode 0666\).*chmod 600"):
        await open_store(f"sqlite://{tmp_path}/meta.db")
    (tmp_path / "meta.db").chmod(0o602)
    with pytest.raises(MetadataError, match="writable by other users"):
        await open_store(f"sqlite://{tmp_path}/meta.db")

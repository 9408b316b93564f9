"""SQLite store specifics: the heartbeat runs in its own thread, the file's schema, format
version and modes."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.processes import DIE_WITH_PARENT, REPO
from walog.errors import MetadataError, NewerFormatError
from walog.metadata import open_store
from walog.metadata.sqlite_schema import SQLITE_STORE_FORMAT

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


GOLDEN_STORE = REPO / "tests" / "golden" / "v1" / "metadata.sqlite"
"""A store written by walog 0.1.0, which gave the file no version (never modified)."""


def user_version(db: Path) -> int:
    """The file's ``PRAGMA user_version``, read without writing."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


async def test_a_newer_sqlite_metadata_store_version_is_refused_naming_both_versions(
    tmp_path: Path,
) -> None:
    db = tmp_path / "meta.db"
    store = await open_store(f"sqlite://{db}")
    await store.create("/kept", b"data")
    await store.close()
    newer = SQLITE_STORE_FORMAT + 1
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        # Out of WAL mode, so that anything the store wrote would show in the file itself.
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute(f"PRAGMA user_version = {newer}")
    before = db.read_bytes()
    message = (
        f"sqlite metadata store {db} has format version {newer}; "
        f"this walog reads up to {SQLITE_STORE_FORMAT}: upgrade walog"
    )
    with pytest.raises(NewerFormatError, match=re.escape(message)):
        await open_store(f"sqlite://{db}")
    assert db.read_bytes() == before, "the store wrote to a file of a newer version"
    assert not (tmp_path / "meta.db-wal").exists(), "the store switched a newer file to WAL"


async def test_a_sqlite_metadata_store_without_a_version_reads_as_version_1(
    tmp_path: Path,
) -> None:
    db = tmp_path / "meta.db"
    shutil.copyfile(GOLDEN_STORE, db)
    db.chmod(0o600)
    assert user_version(db) == 0
    store = await open_store(f"sqlite://{db}", create=False)
    try:
        assert await store.children("/ledgers") == ["1", "2", "4", "5", "6"]
        await store.create("/written-by-this-walog", b"x")
    finally:
        await store.close()
    assert user_version(db) == 0, "an old file is read as it is, not stamped"
    fresh = await open_store(f"sqlite://{tmp_path}/new.db")
    await fresh.close()
    assert user_version(tmp_path / "new.db") == SQLITE_STORE_FORMAT


# One opener process: after "ready", opens (and closes) the store of each path it reads from
# stdin and answers "ok" or the error, one line each; ends at end of input.
OPENER = """
import asyncio, sys
from walog.metadata import open_store

async def main():
    print("ready", flush=True)
    while path := (await asyncio.to_thread(sys.stdin.readline)).strip():
        try:
            await (await open_store("sqlite://" + path)).close()
            print("ok", flush=True)
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}", flush=True)

asyncio.run(main())
"""
OPENERS = 4
FRESH_FILES = 600
MEMORY_FS = Path("/dev/shm")


def test_opening_a_metadata_file_never_fails_because_another_process_opens_it() -> None:
    # Processes that open a fresh file together all switch it to WAL and create the schema
    # at the same moment (the bookies of a new local cluster do). The files live in memory
    # so that no disk flush paces the openers apart: the race is between their locks.
    assert MEMORY_FS.is_dir(), f"{MEMORY_FS} (a tmpfs) is missing on this machine"
    with tempfile.TemporaryDirectory(dir=MEMORY_FS, prefix="walog-test-") as tmp:
        failures = open_together(Path(tmp))
    assert not failures, f"{len(failures)} of {OPENERS * FRESH_FILES} opens failed: {failures}"


def open_together(tmp: Path) -> list[str]:
    """Let OPENERS processes open each of FRESH_FILES new files at once; their failures."""
    openers = [
        subprocess.Popen(
            [*DIE_WITH_PARENT, sys.executable, "-c", OPENER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(OPENERS)
    ]
    failures: list[str] = []
    try:
        pipes = [(p.stdin, p.stdout) for p in openers]
        for _, out in pipes:
            assert out is not None and out.readline() == "ready\n"
        for n in range(FRESH_FILES):
            path = tmp / f"meta-{n}.db"
            for inp, _ in pipes:
                assert inp is not None
                inp.write(f"{path}\n")
                inp.flush()
            for _, out in pipes:
                assert out is not None
                answer = out.readline().strip()
                if answer != "ok":
                    failures.append(f"{path.name}: {answer or 'opener died'}")
    finally:
        for p in openers:
            assert p.stdin is not None
            p.stdin.close()
        for p in openers:
            p.wait(timeout=30)
            assert p.stdout is not None
            p.stdout.close()
    return failures

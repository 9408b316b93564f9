"""SQLite store specifics: the heartbeat runs in its own thread, the file's schema and modes."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.processes import DIE_WITH_PARENT, REPO
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

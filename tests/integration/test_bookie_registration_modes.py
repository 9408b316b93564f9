"""A bookie's registration moves between available and read-only on both metadata stores:
the new record first, so the bookie never looks gone; and a restarted bookie waits for its
crashed predecessor's record in either mode."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

from bookie.registration import Registration
from tests.integration.bookies import REPO_ROOT
from tests.processes import DIE_WITH_PARENT
from walog.metadata import open_store
from walog.metadata.layout import AVAILABLE_BOOKIES, READ_ONLY_BOOKIES, read_only_bookie_path

BOOKIE = "127.0.0.1:3181"


@pytest.fixture(params=["sqlite", pytest.param("zk", marks=pytest.mark.zk)])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/meta.db?session_timeout=1.5"
    zookeeper = request.getfixturevalue("zookeeper")
    return str(zookeeper.uri(f"/registration-{uuid.uuid4().hex[:12]}", session_timeout=2))


async def test_registration_switches_between_available_and_read_only(uri: str) -> None:
    store = await open_store(uri)
    observer = await open_store(uri)
    try:
        registration = Registration(store, BOOKIE, "instance", "1.0")
        await registration.set_read_only(True)  # before register: only chooses the mode
        await registration.register()
        assert await observer.children(READ_ONLY_BOOKIES) == [BOOKIE]
        assert await observer.children(AVAILABLE_BOOKIES) == []

        seen: list[tuple[list[str], list[str]]] = []
        await registration.set_read_only(False)
        seen.append(
            (await observer.children(AVAILABLE_BOOKIES), await observer.children(READ_ONLY_BOOKIES))
        )
        await registration.set_read_only(True)
        seen.append(
            (await observer.children(AVAILABLE_BOOKIES), await observer.children(READ_ONLY_BOOKIES))
        )
        assert seen == [([BOOKIE], []), ([], [BOOKIE])]

        await registration.unregister()
        assert await observer.children(READ_ONLY_BOOKIES) == []
    finally:
        await store.close()
        await observer.close()


async def test_a_restart_waits_for_a_crashed_read_only_predecessor(uri: str) -> None:
    # The predecessor: a process holding the read-only record, then killed.
    helper = await asyncio.create_subprocess_exec(
        *DIE_WITH_PARENT,
        *[sys.executable, "-m", "tests.integration.metadata_helper", "register", uri],
        read_only_bookie_path(BOOKIE),
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO_ROOT,
    )
    try:
        assert helper.stdout is not None and (await helper.stdout.readline()).strip() == b"ready"
    finally:
        helper.kill()
        await helper.wait()
    store = await open_store(uri)
    try:
        registration = Registration(store, BOOKIE, "instance", "1.0")
        # Writable now: it still waits until the read-only record of the old process expired.
        await registration.register(stale_wait=30)
        assert await store.exists(read_only_bookie_path(BOOKIE)) is None
        assert await store.children(AVAILABLE_BOOKIES) == [BOOKIE]
    finally:
        await store.close()

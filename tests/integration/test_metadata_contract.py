"""One contract for every MetadataStore: SQLite file and a real ZooKeeper server.

Each test runs against both backends. Liveness tests use real processes (SIGKILL, SIGSTOP)
and, for ZooKeeper, a forced session expiry (a second client on the same session id and
password closes the session).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.processes import DIE_WITH_PARENT
from walog.errors import MetadataConflictError, MetadataError, WalogError, is_retriable
from walog.metadata import MetadataStore, NodeExistsError, NodeNotFoundError, open_store
from walog.testing.process import freeze_outside_metadata_writes

REPO = Path(__file__).resolve().parents[2]
SQLITE_SESSION_S = 1.5
ZK_SESSION_S = 2.0
LIVENESS_DEADLINE_S = 20.0


@pytest.fixture(params=["sqlite", pytest.param("zk", marks=pytest.mark.zk)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_uri(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite://{tmp_path}/meta.db?session_timeout={SQLITE_SESSION_S}"
    zookeeper = request.getfixturevalue("zookeeper")
    return str(zookeeper.uri(f"/contract-{uuid.uuid4().hex[:12]}", session_timeout=ZK_SESSION_S))


@pytest.fixture
async def store(store_uri: str) -> AsyncIterator[MetadataStore]:
    opened = await open_store(store_uri)
    yield opened
    await opened.close()


@pytest.fixture
async def other(store_uri: str) -> AsyncIterator[MetadataStore]:
    """A second, independent store instance (another session) on the same metadata."""
    opened = await open_store(store_uri)
    yield opened
    await opened.close()


class Probe:
    """A watch callback that hands each call to the test's event loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._calls: asyncio.Queue[None] = asyncio.Queue()

    def __call__(self) -> None:
        self._loop.call_soon_threadsafe(self._calls.put_nowait, None)

    async def next(self, within: float = 10.0) -> None:
        await asyncio.wait_for(self._calls.get(), within)

    def drain(self) -> int:
        count = 0
        while not self._calls.empty():
            self._calls.get_nowait()
            count += 1
        return count


async def wait_until(
    condition: Callable[[], Awaitable[bool]], probe: Probe, within: float = LIVENESS_DEADLINE_S
) -> None:
    """Re-check ``condition`` after each watch call until it holds (or fail ``within``)."""
    deadline = time.monotonic() + within
    while not await condition():
        remaining = deadline - time.monotonic()
        assert remaining > 0, "condition not reached before the deadline"
        try:
            await probe.next(within=remaining)
        except TimeoutError:
            continue


def helper_process(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [*DIE_WITH_PARENT, sys.executable, "-m", "tests.integration.metadata_helper", *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()


# -- records ------------------------------------------------------------------------------


async def test_create_starts_at_version_zero(store: MetadataStore, other: MetadataStore) -> None:
    assert await store.create("/a", b"one") == 0
    assert await other.get("/a") == (b"one", 0)


async def test_create_existing_raises_node_exists(store: MetadataStore) -> None:
    await store.create("/a", b"")
    with pytest.raises(NodeExistsError):
        await store.create("/a", b"again")
    assert await store.get("/a") == (b"", 0)


async def test_create_makes_missing_parents(store: MetadataStore) -> None:
    await store.create("/x/y/z", b"deep")
    assert await store.children("/x") == ["y"]
    assert await store.exists("/x/y") == 0


async def test_create_without_parent_and_make_parents_false_raises(store: MetadataStore) -> None:
    with pytest.raises(NodeNotFoundError):
        await store.create("/no/parent", b"", make_parents=False)
    assert await store.exists("/no") is None


async def test_set_with_current_version_increments_it(store: MetadataStore) -> None:
    await store.create("/a", b"v0")
    assert await store.set("/a", b"v1", 0) == 1
    assert await store.set("/a", b"v2", 1) == 2
    assert await store.get("/a") == (b"v2", 2)


async def test_set_with_stale_version_conflicts(store: MetadataStore, other: MetadataStore) -> None:
    await store.create("/a", b"v0")
    await other.set("/a", b"theirs", 0)
    with pytest.raises(MetadataConflictError) as info:
        await store.set("/a", b"mine", 0)
    assert isinstance(info.value, WalogError) and is_retriable(info.value)
    assert await store.get("/a") == (b"theirs", 1)


async def test_set_of_missing_record_raises_not_found(store: MetadataStore) -> None:
    with pytest.raises(NodeNotFoundError):
        await store.set("/missing", b"", 0)


async def test_exists_reports_version_or_none(store: MetadataStore) -> None:
    assert await store.exists("/a") is None
    await store.create("/a", b"")
    await store.set("/a", b"x", 0)
    assert await store.exists("/a") == 1


async def test_after_sync_a_read_sees_every_record_created_before_it_by_another_session(
    store: MetadataStore, other: MetadataStore
) -> None:
    await other.create("/synced/a", b"x")
    await store.sync("/synced")
    assert await store.exists("/synced/a") == 0
    assert await store.children("/synced") == ["a"]


async def test_delete_with_wrong_version_conflicts_and_keeps_record(store: MetadataStore) -> None:
    await store.create("/a", b"")
    with pytest.raises(MetadataConflictError):
        await store.delete("/a", version=3)
    await store.delete("/a", version=0)
    assert await store.exists("/a") is None


async def test_delete_removes_children_recursively(store: MetadataStore) -> None:
    for path in ("/t/a/1", "/t/a/2", "/t/b", "/t_sibling"):
        await store.create(path, b"")
    await store.delete("/t")
    assert await store.exists("/t") is None
    assert await store.exists("/t/a/1") is None
    assert "t" not in await store.children("/")
    assert await store.exists("/t_sibling") == 0


async def test_delete_missing_raises_not_found(store: MetadataStore) -> None:
    with pytest.raises(NodeNotFoundError):
        await store.delete("/missing")


async def test_children_are_sorted_names(store: MetadataStore) -> None:
    for name in ("b", "a", "c10", "c9"):
        await store.create(f"/p/{name}", b"")
    await store.create("/p/a/grandchild", b"")
    assert await store.children("/p") == ["a", "b", "c10", "c9"]
    assert await store.children("/p/b") == []
    assert await store.children("/absent") == []


async def test_bad_path_raises_value_error(store: MetadataStore) -> None:
    for bad in ("relative", "/trailing/", "/double//slash", "/dot/../x"):
        with pytest.raises(ValueError, match="metadata path"):
            await store.get(bad)


# -- ids ----------------------------------------------------------------------------------


async def test_next_id_strictly_increasing_under_concurrent_tasks(store: MetadataStore) -> None:
    async def take(n: int) -> list[int]:
        return [await store.next_id("ids") for _ in range(n)]

    runs = await asyncio.gather(*(take(20) for _ in range(4)))
    for ids in runs:
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    every = [i for ids in runs for i in ids]
    assert len(set(every)) == len(every) == 80
    later = await store.next_id("ids")
    assert later > max(every)


async def test_next_id_counters_are_independent(store: MetadataStore) -> None:
    first = await store.next_id("one")
    await store.next_id("one")
    assert await store.next_id("two") == first


async def test_next_id_unique_across_processes(
    store: MetadataStore, store_uri: str, processes: list[subprocess.Popen[str]]
) -> None:
    for _ in range(3):
        processes.append(helper_process("ids", store_uri, "shared", "30"))
    runs = []
    for proc in processes:
        out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
        assert proc.returncode == 0
        runs.append([int(x) for x in out.split()])
    for ids in runs:
        assert len(ids) == 30 and ids == sorted(ids) and len(set(ids)) == 30
    every = [i for ids in runs for i in ids]
    assert len(set(every)) == 90
    assert await store.next_id("shared") > max(every)


# -- watches ------------------------------------------------------------------------------


async def test_watch_fires_on_create_set_children_and_delete(
    store: MetadataStore, other: MetadataStore
) -> None:
    probe = Probe()
    unsubscribe = store.watch("/w", probe)
    await probe.next()  # the call made once the watch is in place
    steps: list[Callable[[], Awaitable[object]]] = [
        lambda: other.create("/w", b""),
        lambda: other.set("/w", b"x", 0),
        lambda: other.create("/w/child", b""),
        lambda: other.delete("/w/child"),
        lambda: other.delete("/w"),
    ]
    for step in steps:
        probe.drain()
        await step()
        await probe.next()
    unsubscribe()


async def test_watch_stops_after_unsubscribe(store: MetadataStore, other: MetadataStore) -> None:
    await other.create("/w", b"")
    stopped, control = Probe(), Probe()
    unsubscribe = store.watch("/w", stopped)
    store.watch("/w", control)
    await stopped.next()
    await control.next()
    unsubscribe()
    await other.set("/w", b"changed", 0)
    # Both callbacks of a path run in one pass, the stopped one first: once the control
    # has been called for the change, the stopped one would have been too.
    await control.next()
    assert stopped.drain() == 0


async def test_watch_callback_may_call_the_store(store: MetadataStore) -> None:
    loop = asyncio.get_running_loop()
    seen: asyncio.Queue[int | None] = asyncio.Queue()

    def callback() -> None:
        future = asyncio.run_coroutine_threadsafe(store.exists("/w"), loop)
        version = future.result(timeout=10)
        loop.call_soon_threadsafe(seen.put_nowait, version)

    store.watch("/w", callback)
    assert await asyncio.wait_for(seen.get(), 10) is None
    await store.create("/w", b"")
    while (version := await asyncio.wait_for(seen.get(), 10)) is None:
        pass
    assert version == 0


# -- liveness -----------------------------------------------------------------------------


async def test_register_visible_to_other_store_and_gone_after_close(
    store_uri: str, other: MetadataStore
) -> None:
    owner = await open_store(store_uri)
    await owner.register("/live/me", b"here")
    assert await other.get("/live/me") == (b"here", 0)
    with pytest.raises(NodeExistsError):
        await other.register("/live/me", b"me too")
    await owner.close()
    assert await other.exists("/live/me") is None


async def test_unregister_removes_record_and_tolerates_absence(store: MetadataStore) -> None:
    await store.register("/live/me", b"")
    await store.unregister("/live/me")
    assert await store.exists("/live/me") is None
    await store.unregister("/live/me")


async def test_register_gone_after_owner_process_sigkilled(
    store_uri: str, other: MetadataStore, processes: list[subprocess.Popen[str]]
) -> None:
    proc = helper_process("register", store_uri, "/live/doomed")
    processes.append(proc)
    assert proc.stdout is not None
    assert await asyncio.to_thread(proc.stdout.readline) == "ready\n"
    assert await other.exists("/live/doomed") == 0
    probe = Probe()
    other.watch("/live", probe)
    proc.kill()

    async def gone() -> bool:
        return await other.exists("/live/doomed") is None

    await wait_until(gone, probe)


async def test_register_recreated_after_session_expiry(
    backend: str,
    store_uri: str,
    other: MetadataStore,
    processes: list[subprocess.Popen[str]],
    request: pytest.FixtureRequest,
) -> None:
    probe = Probe()
    other.watch("/live", probe)

    async def present() -> bool:
        return await other.exists("/live/phoenix") is not None

    async def gone() -> bool:
        return not await present()

    if backend == "sqlite":
        # The owner is paused past its expiry: another store purges its record; once
        # resumed, its heartbeat notices and registers again.
        proc = helper_process("register", store_uri, "/live/phoenix")
        processes.append(proc)
        assert proc.stdout is not None
        assert await asyncio.to_thread(proc.stdout.readline) == "ready\n"
        # Frozen between its metadata writes: inside one it would hold the file's write
        # lock, and no other process could purge its expired session.
        await asyncio.to_thread(freeze_outside_metadata_writes, proc, store_uri)
        await wait_until(gone, probe)
        proc.send_signal(signal.SIGCONT)
        await wait_until(present, probe)
        return
    owner = await open_store(store_uri)
    try:
        await owner.register("/live/phoenix", b"again")
        session = owner._client.client_id  # type: ignore[attr-defined]
        zookeeper = request.getfixturevalue("zookeeper")
        intruder = KazooClient(hosts=zookeeper.connect_string, client_id=session)
        await asyncio.to_thread(intruder.start)
        await asyncio.to_thread(intruder.stop)  # closing the shared session expires it
        await asyncio.to_thread(intruder.close)
        await wait_until(gone, probe)
        await wait_until(present, probe)
        assert await other.get("/live/phoenix") == (b"again", 0)
    finally:
        await owner.close()


# -- errors -------------------------------------------------------------------------------


async def test_unreachable_store_raises_metadata_error(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        uri = f"sqlite://{tmp_path}/no/such/dir/meta.db"
    else:
        from walog.testing import free_port

        uri = f"zk://127.0.0.1:{free_port()}/walog"
    with pytest.raises(MetadataError):
        await open_store(uri, timeout=1.0)


async def test_calls_after_close_raise_metadata_error(store_uri: str) -> None:
    closing = await open_store(store_uri)
    await closing.close()
    with pytest.raises(MetadataError) as info:
        await closing.get("/a")
    assert not is_retriable(info.value)


# -- ZooKeeper connection loss ------------------------------------------------------------


@pytest.mark.zk
async def test_zookeeper_calls_wait_out_a_suspended_connection() -> None:
    from walog.testing import ZooKeeperServer

    with ZooKeeperServer() as server:
        uri = server.uri("/suspend", session_timeout=8)
        store = await open_store(uri, timeout=15)
        try:
            await store.create("/a", b"v0")
            await store.register("/live/me", b"")
            probe = Probe()
            store.watch("/a", probe)
            await probe.next()
            session = store._client.client_id  # type: ignore[attr-defined]
            server.pause()
            # Long enough for kazoo to drop the connection (about 2/3 of the session
            # timeout without an answer), short of the session expiring.
            pending = asyncio.create_task(store.set("/a", b"v1", 0))
            await asyncio.sleep(6)
            server.resume()
            assert await pending == 1
            assert store._client.client_id == session  # type: ignore[attr-defined]
            assert await store.exists("/live/me") == 0
            probe.drain()
            await store.set("/a", b"v2", 1)
            await probe.next()
        finally:
            await store.close()

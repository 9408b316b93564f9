"""A log's compare-and-swap whose answer is lost (seed 000, "Ledgers to logs").

A write to the metadata store may be applied although its caller sees a connection error
(ZooKeeper's connection dropped between request and reply). The takeover and the roll
retry on such errors; on the retry they must recognise their own change in the list and
count it as done, never take it for a rival's and delete the ledger the stored list now
ends with (after which no writer could open the log and readers would lose records).

A CAS also outlives a caller cancelled while it runs (the stores run it in a thread): a
cancelled takeover or roll must not delete the new ledger its CAS may still add.

Two ways to lose an answer, both over real bookie processes: a store wrapper that applies a
``set`` and then raises the connection error the real stores raise, and a real ZooKeeper
behind a proxy that drops the client's connection right after a ``setData`` request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

import walog.aio as aio
import walog.log.takeover as takeover_module
from tests.integration.cutting_proxy import CuttingProxy, zk_set_data_request
from walog.errors import MetadataError
from walog.log.async_log import AsyncLog
from walog.metadata.layout import log_path
from walog.metadata.store import MetadataStore, WatchCallback
from walog.metadata.uri import ZooKeeperURI, parse_uri
from walog.testing import LocalCluster


class LosesAnswers(MetadataStore):
    """A real store whose next ``set`` of an armed path is applied, then answered with the
    retriable connection error of a lost reply (or, with :meth:`answer_late`, answered only
    once :attr:`release` is set, as a call running on in the store's thread would be)."""

    def __init__(self, inner: MetadataStore) -> None:
        self._inner = inner
        self._armed: dict[str, int] = {}
        self._late: set[str] = set()
        self.lost = 0
        self.waiting = asyncio.Event()
        """Set once a late set was sent (it applies whatever its caller does meanwhile)."""
        self.release = asyncio.Event()
        self.sent: list[asyncio.Task[int]] = []

    def answer_late(self, path: str) -> None:
        """The next ``set`` of ``path`` is carried out at once but answered only after
        :attr:`release` is set."""
        self._late.add(path)

    def lose_next_set(self, path: str, times: int = 1) -> None:
        """Lose the answers of the next ``times`` applied sets of ``path``."""
        self._armed[path] = times

    async def set(self, path: str, data: bytes, version: int) -> int:
        if path in self._late:
            self._late.discard(path)
            self.sent.append(asyncio.ensure_future(self._inner.set(path, data, version)))
            self.waiting.set()
            await self.release.wait()
            return await self.sent[-1]
        new_version = await self._inner.set(path, data, version)
        if self._armed.get(path):
            self._armed[path] -= 1
            self.lost += 1
            raise MetadataError(f"{path}: connection lost before the answer (the set applied)")
        return new_version

    async def get(self, path: str) -> tuple[bytes, int]:
        return await self._inner.get(path)

    async def exists(self, path: str) -> int | None:
        return await self._inner.exists(path)

    async def create(self, path: str, data: bytes, *, make_parents: bool = True) -> int:
        return await self._inner.create(path, data, make_parents=make_parents)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._inner.delete(path, version)

    async def children(self, path: str) -> list[str]:
        return await self._inner.children(path)

    async def next_id(self, counter: str) -> int:
        return await self._inner.next_id(counter)

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        return self._inner.watch(path, callback)

    async def register(self, path: str, data: bytes) -> None:
        await self._inner.register(path, data)

    async def unregister(self, path: str) -> None:
        await self._inner.unregister(path)

    async def close(self) -> None:
        await self._inner.close()


async def read_all(log: AsyncLog) -> list[bytes]:
    out = []
    async with await log.open_reader("earliest") as reader:
        while (record := await reader.read_next(timeout=1.0)) is not None:
            out.append(record.data)
    return out


async def check_log_usable(uri: str, name: str, expected: list[bytes]) -> None:
    """Another client takes the log over (fencing the last two ledgers), appends and reads
    every record back."""
    async with await aio.connect(uri) as other:
        log = await other.open_log(name)
        async with await log.open_writer() as writer:
            await writer.append(b"after")
        assert await read_all(log) == [*expected, b"after"]


async def test_a_takeover_whose_list_cas_answer_was_lost_counts_its_own_change(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await aio.connect(cluster.metadata_uri) as first:
        log = await first.open_log(log_name)
        async with await log.open_writer() as writer:
            await writer.append(b"one")
    async with await aio.connect(cluster.metadata_uri) as client:
        store = LosesAnswers(client.ctx.store)
        client.ctx.store = store
        log = await client.open_log(log_name)
        store.lose_next_set(log_path(log_name))
        writer = await log.open_writer()
        assert store.lost == 1
        meta = await log.metadata()
        assert meta.ledger_ids[-1] == writer.ledger_id  # the list ends with its own ledger
        await writer.append(b"two")
        await writer.close()
    await check_log_usable(cluster.metadata_uri, log_name, [b"one", b"two"])


async def test_a_roll_whose_list_cas_answer_was_lost_counts_its_own_change(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await aio.connect(cluster.metadata_uri) as client:
        store = LosesAnswers(client.ctx.store)
        client.ctx.store = store
        log = await client.open_log(log_name)
        writer = await log.open_writer()
        await writer.append(b"one")
        old = writer.ledger_id
        store.lose_next_set(log_path(log_name))
        await writer.roll()
        assert store.lost == 1
        assert writer.ledger_id != old
        await writer.append(b"two")
        await writer.close()
        assert [s.ledger_id for s in await log.segments()] == [old, writer.ledger_id]
    await check_log_usable(cluster.metadata_uri, log_name, [b"one", b"two"])


async def _cancelled_while_its_cas_runs(store: LosesAnswers, call: asyncio.Task[Any]) -> None:
    """Cancel ``call`` while the list CAS it sent is still unanswered (as ``wait_for`` or a
    closing event loop would), let the CAS finish, then wait for what the cancelled call
    left running in the background."""
    await store.waiting.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    store.release.set()
    await asyncio.gather(*store.sent)
    await asyncio.gather(*takeover_module._discards)


async def test_a_cancelled_takeover_leaves_the_ledger_its_list_names(
    cluster: LocalCluster, log_name: str
) -> None:
    """A ledger leaves the cluster only after a fresh read shows no list names it: a
    takeover cancelled while its list CAS runs on must not delete the ledger that CAS adds."""
    async with await aio.connect(cluster.metadata_uri) as first:
        log = await first.open_log(log_name)
        async with await log.open_writer() as writer:
            await writer.append(b"one")
    async with await aio.connect(cluster.metadata_uri) as client:
        store = LosesAnswers(client.ctx.store)
        client.ctx.store = store
        log = await client.open_log(log_name)
        store.answer_late(log_path(log_name))
        await _cancelled_while_its_cas_runs(store, asyncio.ensure_future(log.open_writer()))
        listed = (await log.metadata()).ledger_ids
        assert set(listed) <= set(await client.list_ledgers()), "a listed ledger was deleted"
    await check_log_usable(cluster.metadata_uri, log_name, [b"one"])


async def test_a_cancelled_roll_leaves_the_ledger_its_list_names(
    cluster: LocalCluster, log_name: str
) -> None:
    """The same rule for a roll whose task is cancelled while its list CAS runs on (as the
    sync API's event loop cancels its tasks when it closes)."""
    async with await aio.connect(cluster.metadata_uri) as client:
        store = LosesAnswers(client.ctx.store)
        client.ctx.store = store
        log = await client.open_log(log_name)
        writer = await log.open_writer()
        await writer.append(b"one")
        store.answer_late(log_path(log_name))
        waiter = asyncio.ensure_future(writer.roll())
        await store.waiting.wait()
        roll = writer._roll_task
        assert roll is not None
        await _cancelled_while_its_cas_runs(store, roll)
        waiter.cancel()
        listed = (await log.metadata()).ledger_ids
        assert len(listed) == 2
        assert set(listed) <= set(await client.list_ledgers()), "a listed ledger was deleted"
    await check_log_usable(cluster.metadata_uri, log_name, [b"one"])


async def test_a_takeover_through_a_zookeeper_connection_cut_before_the_answer(
    zk_cluster: LocalCluster, log_name: str
) -> None:
    uri = parse_uri(zk_cluster.metadata_uri)
    assert isinstance(uri, ZooKeeperURI)
    host, port = uri.connect_string.split(",")[0].rsplit(":", 1)
    async with await aio.connect(zk_cluster.metadata_uri) as first:
        log = await first.open_log(log_name)
        async with await log.open_writer() as writer:
            await writer.append(b"one")
    with CuttingProxy((host, int(port))) as proxy:
        via_proxy = f"zk://127.0.0.1:{proxy.port}{uri.chroot}?session_timeout=20"
        # Calls give up after 1 s while the proxy refuses connections for 3 s: the store's
        # own retry of the set ends with a connection error and the takeover's CAS loop
        # retries on fresh metadata, which already holds its change.
        async with await aio.connect(via_proxy, timeout=1.0) as client:
            log = await client.open_log(log_name)
            proxy.lose_answer_to(zk_set_data_request(uri.chroot + log_path(log_name)), 3.0)
            started = time.monotonic()
            writer = await log.open_writer()
            assert proxy.cut.is_set(), "no setData of the log's list went through the proxy"
            assert time.monotonic() - started >= 1.0  # it did wait out the refusal
            assert (await log.metadata()).ledger_ids[-1] == writer.ledger_id
            await writer.append(b"two")
            await writer.close()
    await check_log_usable(zk_cluster.metadata_uri, log_name, [b"one", b"two"])


async def test_the_store_wrapper_loses_answers_after_applying(
    cluster: LocalCluster, log_name: str
) -> None:
    # The wrapper must really apply the write before it reports the loss, or the tests
    # above would test nothing.
    async with await aio.connect(cluster.metadata_uri) as client:
        store = LosesAnswers(client.ctx.store)
        await store.create("/lost-answers/" + log_name, b"a")
        store.lose_next_set("/lost-answers/" + log_name)
        with pytest.raises(MetadataError, match="connection lost"):
            await store.set("/lost-answers/" + log_name, b"b", 0)
        assert await store.get("/lost-answers/" + log_name) == (b"b", 1)
        await store.delete("/lost-answers/" + log_name)

"""The GC's proof that a ledger was deleted (bookie/gc.py): a candidate absent from the
metadata listing is deleted only once a *synced* read shows it absent, and with that proof
a deleted ledger goes at the first scan at default settings, not after a long grace.

A real bookie core and a real SQLite store; :class:`LaggingView` stands in for a ZooKeeper
server behind its leader: its reads show the store as it was at its last ``sync``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from bookie.config import BookieConfig
from bookie.gc import LedgerCollector
from bookie.storage.engine import BookieCore
from tests.unit.bookie.helpers import add, open_core
from walog.metadata import open_store
from walog.metadata.layout import LEDGERS, ledger_path
from walog.metadata.store import MetadataStore, WatchCallback
from walog.wire.status import Status


def _default(name: str) -> float:
    field = next(f for f in dataclasses.fields(BookieConfig) if f.name == name)
    return float(field.default)  # type: ignore[arg-type]


class LaggingView(MetadataStore):
    """A session on a server that lags: reads answer from the store as it was at the last
    :meth:`sync` (or at the start); changes go to the store itself."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._seen: set[str] = set()
        self.calls: list[str] = []

    async def sync(self, path: str) -> None:
        self.calls.append("sync")
        self._seen = {ledger_path(int(n)) for n in await self._store.children(LEDGERS)}

    async def get(self, path: str) -> tuple[bytes, int]:
        return await self._store.get(path)

    async def exists(self, path: str) -> int | None:
        self.calls.append("exists")
        return 0 if path in self._seen else None

    async def children(self, path: str) -> list[str]:
        self.calls.append("children")
        assert path == LEDGERS
        return sorted(p.rsplit("/", 1)[1] for p in self._seen)

    async def create(self, path: str, data: bytes, *, make_parents: bool = True) -> int:
        return await self._store.create(path, data, make_parents=make_parents)

    async def set(self, path: str, data: bytes, version: int) -> int:
        return await self._store.set(path, data, version)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._store.delete(path, version)

    async def next_id(self, counter: str) -> int:
        return await self._store.next_id(counter)

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        return self._store.watch(path, callback)

    async def register(self, path: str, data: bytes) -> None:
        await self._store.register(path, data)

    async def unregister(self, path: str) -> None:
        await self._store.unregister(path)

    async def close(self) -> None:
        await self._store.close()


async def _written(core: BookieCore, ledger_id: int) -> None:
    for entry_id in range(3):
        assert (await add(core, ledger_id, entry_id))[0] is Status.OK


async def test_a_deleted_ledger_is_collected_at_the_first_scan_at_default_settings(
    tmp_path: Path,
) -> None:
    core = await open_core(tmp_path / "bookie")
    store = await open_store(f"sqlite:///{tmp_path}/meta.db")
    now = [1000.0]
    try:
        await store.create(ledger_path(7), b"{}")
        await _written(core, 7)
        interval = _default("gc_interval_s")
        collector = LedgerCollector(
            core,
            store,
            {7: now[0]},
            interval=interval,
            grace=_default("gc_grace_s"),
            clock=lambda: now[0],
        )
        await store.delete(ledger_path(7))
        now[0] += interval  # the first scan after the last write and the deletion
        assert await collector.collect_once() == [7]
        assert core.ledgers() == []
    finally:
        await store.close()
        await core.close()


async def test_gc_never_deletes_a_ledger_its_lagging_metadata_view_has_not_seen_yet(
    tmp_path: Path,
) -> None:
    core = await open_core(tmp_path / "bookie")
    store = await open_store(f"sqlite:///{tmp_path}/meta.db")
    view = LaggingView(store)
    now = [1000.0]
    try:
        await store.create(ledger_path(5), b"{}")
        await view.sync(LEDGERS)  # the view knows ledger 5, then falls behind
        collector = LedgerCollector(core, view, {}, interval=1.0, grace=0.0, clock=lambda: now[0])
        # Ledger 9 is created elsewhere, and its writer's entries reach this bookie.
        await store.create(ledger_path(9), b"{}")
        await _written(core, 9)
        now[0] += 3600.0
        view.calls.clear()
        assert await collector.collect_once() == []
        assert core.ledgers() == [9]
        assert view.calls == ["children", "sync", "exists"]
        # Once deleted, it goes at the first scan after the view caught up.
        await store.delete(ledger_path(9))
        await view.sync(LEDGERS)
        assert await collector.collect_once() == [9]
    finally:
        await store.close()
        await core.close()

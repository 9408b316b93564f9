"""An in-memory metadata store with versions, CAS, watches, ids and registration.

:class:`SimMetadataServer` is the one shared state (what ZooKeeper holds);
:class:`SimMetadataStore` is one client's session on it and implements walog's
:class:`MetadataStore`. Every call waits a random time (seeded) before it takes effect and
again before its answer returns, so two clients' compare-and-swaps race for real. Each
operation is atomic at the instant it takes effect. With ``lost_answers`` set, a
compare-and-swap that took effect may still answer with a retriable connection error (as
ZooKeeper's client does when the connection drops between request and reply): the caller
cannot tell whether its write was applied.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tests.sim.loop import SimLoop
from walog.errors import MetadataConflictError, MetadataError
from walog.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NodeNotFoundError,
    WatchCallback,
)

_T = TypeVar("_T")
Observer = Callable[[str, str, bytes | None, bytes | None], None]


@dataclasses.dataclass
class _Node:
    data: bytes
    version: int = 0
    owner: str | None = None  # session owning a liveness-bound record


class SimMetadataServer:
    """The shared metadata state; ``delay_s`` bounds each call's two random delays."""

    def __init__(self, loop: SimLoop, delay_s: tuple[float, float] = (0.0002, 0.003)):
        self.loop = loop
        self.rng = loop.rng
        self.trace = loop.trace
        self.delay_s = delay_s
        self.nodes: dict[str, _Node] = {}
        self.counters: dict[str, int] = {}
        self._watches: dict[str, dict[int, WatchCallback]] = {}
        self._watch_ids = 0
        self.observers: list[Observer] = []
        """Called on every change with (session, path, old data, new data); None = absent."""
        self.lost_answers = 0.0
        """Probability that an applied ``set`` answers with a connection error instead."""

    def notify(self, session: str, path: str, old: bytes | None, new: bytes | None) -> None:
        """Tell the observers (invariant monitors) about a change."""
        for observer in self.observers:
            observer(session, path, old, new)

    async def hop(self) -> None:
        """One network hop to or from the server."""
        low, high = self.delay_s
        await asyncio.sleep(self.rng.uniform(low, high))

    def children_of(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            {p[len(prefix) :].split("/", 1)[0] for p in self.nodes if p.startswith(prefix)}
        )

    def changed(self, path: str) -> None:
        """Fire the watches of ``path`` and of its parent (its children changed)."""
        parent = path.rsplit("/", 1)[0] or "/"
        for watched in (path, parent):
            for callback in list(self._watches.get(watched, {}).values()):
                self.loop.call_soon(callback)

    def add_watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        self._watch_ids += 1
        watch_id = self._watch_ids
        self._watches.setdefault(path, {})[watch_id] = callback
        return lambda: self._watches.get(path, {}).pop(watch_id, None) and None

    def expire(self, session: str) -> None:
        """End a session: its liveness-bound records disappear."""
        for path in [p for p, n in self.nodes.items() if n.owner == session]:
            del self.nodes[path]
            self.changed(path)


class SimMetadataStore(MetadataStore):
    """One client's session on a :class:`SimMetadataServer`."""

    def __init__(self, server: SimMetadataServer, session: str) -> None:
        self._server = server
        self.session = session
        self.closed = False
        self.resumed: asyncio.Event | None = None
        """A paused client process: its calls wait until this event is set (None: never
        paused)."""

    async def _hop(self) -> None:
        # A closed session (a crashed client) reaches the server no more.
        if self.closed:
            raise MetadataError(f"metadata session {self.session} is closed")
        if self.resumed is not None:
            await self.resumed.wait()
        await self._server.hop()

    async def get(self, path: str) -> tuple[bytes, int]:
        """``(data, version)`` of a record."""
        await self._hop()
        node = self._server.nodes.get(path)
        if node is None:
            await self._hop()
            raise NodeNotFoundError(path)
        result = (node.data, node.version)
        await self._hop()
        return result

    async def exists(self, path: str) -> int | None:
        """The record's version or None."""
        await self._hop()
        node = self._server.nodes.get(path)
        version = None if node is None else node.version
        await self._hop()
        return version

    async def _create_node(self, path: str, data: bytes, *, make_parents: bool = True) -> int:
        """Create a record at version 0."""
        await self._hop()
        self._create(path, data, owner=None)
        await self._hop()
        return 0

    def _create(self, path: str, data: bytes, owner: str | None) -> None:
        server = self._server
        if path in server.nodes:
            raise NodeExistsError(path)
        server.nodes[path] = _Node(bytes(data), 0, owner)
        server.trace.log(f"meta {self.session} create {path}")
        server.notify(self.session, path, None, bytes(data))
        server.changed(path)

    async def _set(self, path: str, data: bytes, version: int) -> int:
        """Compare-and-swap the record's data."""
        server = self._server
        await self._hop()
        node = server.nodes.get(path)
        if node is None:
            await self._hop()
            raise NodeNotFoundError(path)
        if node.version != version:
            server.trace.log(f"meta {self.session} set {path} CONFLICT v{version}!=v{node.version}")
            await self._hop()
            raise MetadataConflictError(f"{path}: version {version} != {node.version}")
        old = node.data
        node.data = bytes(data)
        node.version += 1
        server.notify(self.session, path, old, node.data)
        new_version = node.version
        server.trace.log(f"meta {self.session} set {path} v{new_version} {_summary(data)}")
        server.changed(path)
        await self._hop()
        if server.lost_answers and server.rng.random() < server.lost_answers:
            server.trace.log(f"meta {self.session} set {path} v{new_version} ANSWER LOST")
            raise MetadataError(f"{path}: connection lost before the answer (the set applied)")
        return new_version

    async def _delete(self, path: str, version: int = -1) -> None:
        """Delete a record and its children."""
        server = self._server
        await self._hop()
        node = server.nodes.get(path)
        if node is None:
            await self._hop()
            raise NodeNotFoundError(path)
        if version != -1 and node.version != version:
            await self._hop()
            raise MetadataConflictError(f"{path}: version {version} != {node.version}")
        prefix = path.rstrip("/") + "/"
        for doomed in [p for p in server.nodes if p == path or p.startswith(prefix)]:
            server.notify(self.session, doomed, server.nodes.pop(doomed).data, None)
            server.changed(doomed)
        server.trace.log(f"meta {self.session} delete {path}")
        await self._hop()

    async def children(self, path: str) -> list[str]:
        """Sorted names of the direct children."""
        await self._hop()
        names = self._server.children_of(path)
        await self._hop()
        return names

    async def _next_id(self, counter: str) -> int:
        """A new id from the named counter (strictly increasing)."""
        server = self._server
        await self._hop()
        value = server.counters.get(counter, 0) + 1
        server.counters[counter] = value
        await self._hop()
        return value

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        """Persistent watch on the record and its children."""
        return self._server.add_watch(path, callback)

    async def _register(self, path: str, data: bytes) -> None:
        """A record bound to this session."""
        await self._hop()
        if self.closed:  # the session ended while the request travelled: no record outlives it
            raise MetadataError(f"metadata session {self.session} is closed")
        existing = self._server.nodes.get(path)
        if existing is not None and existing.owner == self.session:
            existing.data = bytes(data)
        else:
            self._create(path, data, owner=self.session)
        await self._hop()

    async def _unregister(self, path: str) -> None:
        """Remove a record made by :meth:`register`."""
        await self._hop()
        node = self._server.nodes.get(path)
        if node is not None and node.owner == self.session:
            del self._server.nodes[path]
            self._server.changed(path)
        await self._hop()

    # A request sent is carried out: the client's task may be cancelled while it waits for
    # the answer (as ZooKeeper's and SQLite's stores run calls in threads), but the change
    # still happens. Hence every change runs as a task of its own, shielded.

    async def create(self, path: str, data: bytes, *, make_parents: bool = True) -> int:
        """Create a record at version 0."""
        return await _sent(self._create_node(path, data))

    async def set(self, path: str, data: bytes, version: int) -> int:
        """Compare-and-swap the record's data."""
        return await _sent(self._set(path, data, version))

    async def delete(self, path: str, version: int = -1) -> None:
        """Delete a record and its children."""
        await _sent(self._delete(path, version))

    async def next_id(self, counter: str) -> int:
        """A new id from the named counter (strictly increasing)."""
        return await _sent(self._next_id(counter))

    async def register(self, path: str, data: bytes) -> None:
        """A record bound to this session."""
        await _sent(self._register(path, data))

    async def unregister(self, path: str) -> None:
        """Remove a record made by :meth:`register`."""
        await _sent(self._unregister(path))

    async def close(self) -> None:
        """End the session: later calls fail with MetadataError."""
        self.closed = True
        self._server.expire(self.session)


async def _sent(call: Coroutine[Any, Any, _T]) -> _T:
    """Await ``call`` as a request already sent: cancelling the caller does not stop it."""
    return await asyncio.shield(asyncio.ensure_future(call))


def _summary(data: bytes) -> str:
    """A short form of a record for traces: the protocol-relevant fields of a ledger."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "state" in doc:
        return f"{doc['state']} last={doc.get('last_entry_id')} ens={doc.get('ensembles')}"
    if isinstance(doc, dict) and "ledgers" in doc:
        listed = [
            f"{i.get('ledger_id')}:{i.get('state')}:{i.get('last_entry_id')}"
            for i in doc["ledgers"]
            if isinstance(i, dict)
        ]
        return f"epoch={doc.get('epoch')} ledgers={listed} pending={doc.get('pending_deletion')}"
    text = data.decode(errors="replace")
    return text if len(text) <= 160 else text[:157] + "..."


__all__ = ["SimMetadataServer", "SimMetadataStore"]

"""The metadata store interface: versioned records with compare-and-swap.

Two implementations stand behind it: ZooKeeper through kazoo (``zk://``) and an embedded
SQLite file (``sqlite:///``). Both pass one contract test suite (tests/integration). The
simulator has an in-memory one. Paths are ``/``-separated, absolute, relative to the
store's root (the ZooKeeper chroot, or the SQLite file).

Every version is an integer that starts at 0 when a record is created and grows by one on
each set. A ``set`` or ``delete`` with the wrong version raises
:class:`walog.MetadataConflictError`.

Every call ends within the store's call timeout (a client's ``Timeouts.metadata``), retries
included, or raises the retriable :class:`walog.MetadataError` of :func:`call_timed_out`.
A change that ran out of time may still apply afterwards (its request may have reached the
store, or still runs in the store's thread): its outcome is unknown, never "not applied",
and the caller re-reads the record to find out (docs/protocol.md, "Compare-and-swap").
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from walog.errors import MetadataError, WalogError


class NodeNotFoundError(WalogError):
    """The metadata record does not exist."""


class NodeExistsError(WalogError):
    """A metadata record already exists at that path."""


def call_timed_out(
    store: str, what: str, path: str, seconds: float, *, change: bool
) -> MetadataError:
    """The error of a store call that did not end within the call timeout.

    Retriable: the same call may succeed once the store answers again. For a change
    (``change``: create, set, delete, a counter or a registration) the message says that
    its outcome is unknown.
    """
    outcome = (
        "; the change may or may not have been applied (re-read the record to find out)"
        if change
        else ""
    )
    err = MetadataError(
        f"{store} did not complete {what} {path} within {seconds:g}s (Timeouts.metadata){outcome}"
    )
    err.retriable = True
    return err


WatchCallback = Callable[[], None]
"""Called (on any thread) after the watched record or its children may have changed."""


class MetadataStore(abc.ABC):
    """Versioned get / create / CAS set / delete / children / watch, ids, registration.

    All I/O methods are coroutines; implementations run blocking client calls in their own
    threads, never on the event loop.
    """

    @abc.abstractmethod
    async def get(self, path: str) -> tuple[bytes, int]:
        """Return ``(data, version)``; :class:`NodeNotFoundError` if absent."""

    @abc.abstractmethod
    async def exists(self, path: str) -> int | None:
        """Return the record's version, or None when it does not exist."""

    async def sync(self, path: str) -> None:
        """Bring this store's view up to date: every change acknowledged (to any client)
        before the call is visible to the reads made after it returns.

        ZooKeeper serves reads from whichever server the session is connected to, which
        may lag behind the leader; its ``sync`` makes that server catch up first. Stores
        whose reads are always current (SQLite, one file) need nothing: this default
        returns at once."""
        del path

    @abc.abstractmethod
    async def create(self, path: str, data: bytes, *, make_parents: bool = True) -> int:
        """Create a record (version 0); :class:`NodeExistsError` if it exists."""

    @abc.abstractmethod
    async def set(self, path: str, data: bytes, version: int) -> int:
        """Compare-and-swap: replace the data if the version matches; return the new version.

        :class:`walog.MetadataConflictError` if the version differs,
        :class:`NodeNotFoundError` if the record is gone.
        """

    @abc.abstractmethod
    async def delete(self, path: str, version: int = -1) -> None:
        """Delete a record (any version when ``version == -1``).

        :class:`NodeNotFoundError` if absent, :class:`walog.MetadataConflictError` on a
        version mismatch. Deleting a record that has children deletes them too.
        """

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Names (not paths) of the direct children of ``path``, sorted; [] when none
        (also when ``path`` itself does not exist)."""

    @abc.abstractmethod
    async def next_id(self, counter: str) -> int:
        """A new unique, strictly increasing id from the named counter (ledger ids)."""

    @abc.abstractmethod
    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        """Call ``callback`` whenever the record at ``path`` or its set of children changes
        (created, set, deleted). Persistent until the returned function is called.

        The callback also runs once as soon as the watch is in place, so a change racing
        with the set-up is never missed; callbacks may be spurious, readers re-read."""

    @abc.abstractmethod
    async def register(self, path: str, data: bytes) -> None:
        """Create a liveness-bound record: it disappears when this store's session ends
        (ZooKeeper ephemeral node; SQLite row with heartbeat and expiry). It is re-created
        after a session expiry for as long as this store is open.
        :class:`NodeExistsError` if a record already exists at ``path``."""

    @abc.abstractmethod
    async def unregister(self, path: str) -> None:
        """Remove a record made by :meth:`register` (no error if already gone)."""

    def on_session_expired(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (once, from any thread) when this store's session expires or
        must be presumed expired; the returned function cancels that.

        ZooKeeper: the server expired the session, or the store has had no connection for
        longer than the session timeout (the ensemble has expired it by then). Stores whose
        session cannot expire under their client (SQLite) never call it.
        """
        return lambda: None

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the session; liveness-bound records of this store disappear."""


__all__ = [
    "MetadataStore",
    "NodeExistsError",
    "NodeNotFoundError",
    "WatchCallback",
    "call_timed_out",
]

"""Announcing a serving bookie in the metadata store.

A bookie is *available* while its liveness-bound record ``bookie_path(bookie_id)`` exists:
a ZooKeeper ephemeral node, or an SQLite row kept alive by heartbeats. Clients choose
ensembles among available bookies only. The record is made once the gRPC port serves and
removed first thing on a clean shutdown, so clients stop choosing the bookie before it
stops answering. After a crash the store's session expiry removes it. The store itself
re-creates the record after a ZooKeeper session expiry for as long as it is open.

A read-only bookie (full disks, failed journal: bookie/disks.py) is announced under
``read_only_bookie_path(bookie_id)`` instead: no new ensemble picks it, and auto-recovery
still counts it as alive (its entries can be read). A switch creates the new record before
it removes the old one, so the bookie never looks gone.
"""

from __future__ import annotations

import asyncio
import json
import time

import structlog

from walog.errors import WalogError
from walog.metadata.layout import (
    BOOKIE_RECORD_FORMAT,
    DEFAULT_RACK,
    bookie_path,
    read_only_bookie_path,
)
from walog.metadata.store import MetadataStore, NodeExistsError

log = structlog.get_logger("bookie.registration")

STALE_WAIT_S = 60.0
"""How long a restarting bookie waits for its crashed predecessor's record to expire."""


class BookieAlreadyRunningError(WalogError):
    """Another live process is registered under this bookie id."""


class Registration:
    """The availability record of one bookie.

    Args:
        store: the metadata store (its session bounds the record's life).
        bookie_id: ``HOST:PORT`` of the bookie.
        instance_id: the bookie's cookie instance id.
        version: the software version announced to clients.
        rack: the rack (or zone) of the bookie's host, read by rack-aware placement.
        max_entry_bytes: the largest entry payload the bookie stores (``--max-entry-bytes``),
            announced so that a log's writer checks its own limit against it at open;
            None announces nothing.
    """

    def __init__(
        self,
        store: MetadataStore,
        bookie_id: str,
        instance_id: str,
        version: str,
        *,
        rack: str = DEFAULT_RACK,
        max_entry_bytes: int | None = None,
    ) -> None:
        self._store = store
        self.bookie_id = bookie_id
        self.path = bookie_path(bookie_id)
        self.read_only_path = read_only_bookie_path(bookie_id)
        self._read_only = False
        self._instance_id = instance_id
        self._version = version
        self.rack = rack
        self.max_entry_bytes = max_entry_bytes
        self._registered = False

    def record(self) -> bytes:
        """The JSON document stored at :attr:`path`."""
        record: dict[str, object] = {
            "bookie_id": self.bookie_id,
            "format": BOOKIE_RECORD_FORMAT,
            "instance_id": self._instance_id,
            "rack": self.rack,
            "version": self._version,
            "started": time.time(),
        }
        if self.max_entry_bytes is not None:
            record["max_entry_bytes"] = self.max_entry_bytes
        return json.dumps(record, sort_keys=True).encode()

    @property
    def read_only(self) -> bool:
        """True when the bookie is (or, before :meth:`register`, will be) announced as
        read-only."""
        return self._read_only

    @property
    def current_path(self) -> str:
        """The record's path in the current mode."""
        return self.read_only_path if self._read_only else self.path

    @property
    def registered(self) -> bool:
        """True between :meth:`register` and :meth:`unregister`."""
        return self._registered

    async def register(self, stale_wait: float = STALE_WAIT_S) -> None:
        """Announce the bookie as available.

        A record left by this bookie's previous, crashed process lives on until that
        process's session expires; wait for it to go (a watch, no polling) rather than
        fail or steal it.

        Args:
            stale_wait: seconds to wait for an existing record to disappear.

        Raises:
            BookieAlreadyRunningError: the record is still there after ``stale_wait``:
                another process serves under this bookie id.
        """
        path = self.current_path
        other = self.path if self._read_only else self.read_only_path
        if await self._store.exists(other) is not None:
            # A crashed predecessor in the other mode: wait for it as for one in this mode.
            log.info(
                "previous registration still alive; waiting for its session to expire",
                path=other,
            )
            await self._wait_gone(other, stale_wait)
        try:
            await self._store.register(path, self.record())
        except NodeExistsError:
            log.info(
                "previous registration still alive; waiting for its session to expire",
                path=path,
            )
            await self._wait_gone(path, stale_wait)
            await self._store.register(path, self.record())
        self._registered = True
        log.info("bookie registered", path=path)

    async def set_read_only(self, read_only: bool) -> None:
        """Announce the bookie as read-only, or as available again.

        Before :meth:`register` this only chooses the mode :meth:`register` announces.

        Raises:
            WalogError: the metadata store failed; the mode is unchanged (call again).
        """
        if read_only == self._read_only:
            return
        if not self._registered:
            self._read_only = read_only
            return
        new, old = (
            (self.read_only_path, self.path) if read_only else (self.path, self.read_only_path)
        )
        try:
            await self._store.register(new, self.record())
        except NodeExistsError:
            # Left by this session's earlier, interrupted switch (another session's record
            # is not removed by unregister, and the second register fails again).
            await self._store.unregister(new)
            await self._store.register(new, self.record())
        await self._store.unregister(old)
        self._read_only = read_only
        log.info("bookie re-registered", path=new, read_only=read_only)

    async def _wait_gone(self, path: str, within: float) -> None:
        changed = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_change() -> None:
            loop.call_soon_threadsafe(changed.set)

        cancel = self._store.watch(path, on_change)
        try:
            async with asyncio.timeout(within):
                while await self._store.exists(path) is not None:
                    await changed.wait()
                    changed.clear()
        except TimeoutError as exc:
            raise BookieAlreadyRunningError(
                f"{path} still exists after {within:g}s: another process is serving as "
                f"bookie {self.bookie_id}; stop it or choose another --listen address"
            ) from exc
        finally:
            cancel()

    async def unregister(self) -> None:
        """Stop announcing the bookie (no error if the record is already gone)."""
        if not self._registered:
            return
        path = self.current_path
        await self._store.unregister(path)
        self._registered = False
        log.info("bookie unregistered", path=path)


__all__ = ["STALE_WAIT_S", "BookieAlreadyRunningError", "Registration"]

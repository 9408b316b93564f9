"""Announcing a serving bookie in the metadata store.

A bookie is *available* while its liveness-bound record ``bookie_path(bookie_id)`` exists:
a ZooKeeper ephemeral node, or an SQLite row kept alive by heartbeats. Clients choose
ensembles among available bookies only. The record is made once the gRPC port serves and
removed first thing on a clean shutdown, so clients stop choosing the bookie before it
stops answering. After a crash the store's session expiry removes it. The store itself
re-creates the record after a ZooKeeper session expiry for as long as it is open.
"""

from __future__ import annotations

import asyncio
import json
import time

import structlog

from walog.errors import WalogError
from walog.metadata.layout import DEFAULT_RACK, bookie_path
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
    """

    def __init__(
        self,
        store: MetadataStore,
        bookie_id: str,
        instance_id: str,
        version: str,
        *,
        rack: str = DEFAULT_RACK,
    ) -> None:
        self._store = store
        self.bookie_id = bookie_id
        self.path = bookie_path(bookie_id)
        self._instance_id = instance_id
        self._version = version
        self.rack = rack
        self._registered = False

    def record(self) -> bytes:
        """The JSON document stored at :attr:`path`."""
        return json.dumps(
            {
                "bookie_id": self.bookie_id,
                "instance_id": self._instance_id,
                "rack": self.rack,
                "version": self._version,
                "started": time.time(),
            },
            sort_keys=True,
        ).encode()

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
        try:
            await self._store.register(self.path, self.record())
        except NodeExistsError:
            log.info(
                "previous registration still alive; waiting for its session to expire",
                path=self.path,
            )
            await self._wait_gone(stale_wait)
            await self._store.register(self.path, self.record())
        self._registered = True
        log.info("bookie registered", path=self.path)

    async def _wait_gone(self, within: float) -> None:
        changed = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_change() -> None:
            loop.call_soon_threadsafe(changed.set)

        cancel = self._store.watch(self.path, on_change)
        try:
            async with asyncio.timeout(within):
                while await self._store.exists(self.path) is not None:
                    await changed.wait()
                    changed.clear()
        except TimeoutError as exc:
            raise BookieAlreadyRunningError(
                f"{self.path} still exists after {within:g}s: another process is serving as "
                f"bookie {self.bookie_id}; stop it or choose another --listen address"
            ) from exc
        finally:
            cancel()

    async def unregister(self) -> None:
        """Stop announcing the bookie (no error if the record is already gone)."""
        if not self._registered:
            return
        await self._store.unregister(self.path)
        self._registered = False
        log.info("bookie unregistered", path=self.path)


__all__ = ["STALE_WAIT_S", "BookieAlreadyRunningError", "Registration"]

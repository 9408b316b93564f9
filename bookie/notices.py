"""What a bookie follows and tells through the metadata store, besides its registration.

- :class:`DrainMark`: its decommission mark (``walog bookie decommission``); while the mark
  exists the bookie is read-only, so writers move their ledgers elsewhere.
- :class:`DamageReports`: the ledgers of which it found a damaged stored copy, published
  under ``/underreplication/ledgers`` for the autorecovery daemons to copy those entries
  back to it (walog/autorecovery/daemon.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import structlog

from walog.errors import MetadataConflictError, WalogError
from walog.metadata.layout import (
    decommission_path,
    repair_doc,
    repair_record,
    under_replicated_path,
)
from walog.metadata.store import MetadataStore, NodeExistsError, NodeNotFoundError

log = structlog.get_logger("bookie")


class DamageReports:
    """Publishes the ledgers of which this bookie found a damaged stored copy, for the
    autorecovery daemons to copy those entries back here (walog/autorecovery/daemon.py)."""

    def __init__(self, store: MetadataStore, bookie_id: str) -> None:
        """Report for ``bookie_id`` into ``store``."""
        self._store = store
        self._bookie_id = bookie_id
        self._tasks: set[asyncio.Task[None]] = set()

    def report(self, ledger_id: int, entry_id: int) -> None:
        """Log the damaged copy and publish its ledger (in the background)."""
        log.error("damaged copy reported for re-replication", ledger=ledger_id, entry=entry_id)
        task = asyncio.ensure_future(self.publish(ledger_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def publish(self, ledger_id: int) -> None:
        """Publish ledger ``ledger_id`` for repair now, adding this bookie to its repair
        record (what :meth:`report` does in the background). A failure is logged, never
        raised; a record of a newer format version is left as it is."""
        path = under_replicated_path(ledger_id)
        try:
            for _ in range(5):  # compare-and-set against other reporters and the auditor
                try:
                    await self._store.create(path, repair_record(damaged_on=[self._bookie_id]))
                    return
                except NodeExistsError:
                    pass
                try:
                    raw, version = await self._store.get(path)
                except NodeNotFoundError:
                    continue
                doc = repair_doc(raw, ledger_id)
                if self._bookie_id in doc.get("damaged_on", []):
                    return
                doc["damaged_on"] = sorted({*doc.get("damaged_on", []), self._bookie_id})
                try:
                    await self._store.set(path, json.dumps(doc).encode(), version)
                    return
                except (MetadataConflictError, NodeNotFoundError):
                    continue
        except (WalogError, ValueError) as exc:
            log.warning("damaged copy not reported", ledger=ledger_id, error=str(exc))


class DrainMark:
    """Follows this bookie's decommission mark (``walog bookie decommission``): while it
    exists the bookie is read-only, so writers move their ledgers elsewhere."""

    def __init__(self, store: MetadataStore, bookie_id: str) -> None:
        """Follow the mark of ``bookie_id`` in ``store`` (after :meth:`start`)."""
        self._store = store
        self._path = decommission_path(bookie_id)
        self.reason: str | None = None
        """Why the bookie is read-only because of the mark, or None."""
        self.on_change: Callable[[], None] = lambda: None
        """Called when :attr:`reason` changes."""
        self._cancel: Callable[[], None] | None = None
        self._checks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Read the mark, then follow it with a watch."""
        await self._check()
        loop = asyncio.get_running_loop()

        def changed() -> None:  # on the store's thread
            loop.call_soon_threadsafe(self._spawn)

        self._cancel = self._store.watch(self._path, changed)

    def _spawn(self) -> None:
        task = asyncio.ensure_future(self._check())
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check(self) -> None:
        try:
            marked = await self._store.exists(self._path) is not None
        except WalogError as exc:
            log.warning("decommission mark not read", error=str(exc))
            return
        reason = "decommissioning: drained by 'walog bookie decommission'" if marked else None
        if reason != self.reason:
            self.reason = reason
            self.on_change()

    def stop(self) -> None:
        """Stop following the mark."""
        if self._cancel is not None:
            self._cancel()
        for task in self._checks:
            task.cancel()


__all__ = ["DamageReports", "DrainMark"]

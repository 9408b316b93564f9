"""Garbage collection of deleted ledgers: drop what the metadata store no longer knows.

A ledger's metadata is created before any of its entries reaches a bookie, and it is
deleted only when the ledger is deleted. So a ledger this bookie stores whose metadata is
absent was deleted, provided the two facts are read in the right order: the bookie's list
first, the metadata store's second. A ledger created between the two reads is not in the
bookie's list; one created before is in the metadata store's list unless it was deleted.

As a second guard a ledger written to within ``grace`` seconds (or since less than
``grace`` after the bookie started) is kept, and each candidate's absence is confirmed
with one more metadata read just before it is deleted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Protocol

import structlog

from walog.errors import WalogError
from walog.metadata.layout import LEDGERS, ledger_path
from walog.metadata.store import MetadataStore

log = structlog.get_logger("bookie.gc")


def collectable(
    on_bookie: Iterable[int],
    in_metadata: Iterable[int],
    last_write: Mapping[int, float],
    *,
    now: float,
    started: float,
    grace: float,
) -> list[int]:
    """The ledgers to delete: stored here, absent from metadata, not written within grace.

    Args:
        on_bookie: ledger ids stored on the bookie, listed *before* ``in_metadata``.
        in_metadata: ledger ids present in the metadata store.
        last_write: monotonic time of the last accepted add per ledger (since start).
        now: the current monotonic time.
        started: monotonic time the bookie started (writes before it are unknown).
        grace: seconds a written ledger is protected.
    """
    known = set(in_metadata)
    out = []
    for ledger_id in on_bookie:
        if ledger_id in known:
            continue
        if now - last_write.get(ledger_id, started) < grace:
            continue
        out.append(ledger_id)
    return sorted(out)


class CollectableCore(Protocol):
    """What the collector needs from the storage core."""

    def ledgers(self) -> list[int]:
        """Ids of the ledgers stored on this bookie."""

    async def delete_ledgers(self, ids: list[int]) -> None:
        """Delete the ledgers' entries, index and state."""


def _ledger_ids(names: Iterable[str]) -> list[int]:
    # Anything under /ledgers that is not a ledger id is not ours to interpret.
    return [int(name) for name in names if name.isdigit()]


class LedgerCollector:
    """Periodically deletes ledgers whose metadata is gone.

    Args:
        core: the storage core (``ledgers()``, ``delete_ledgers(ids)``).
        store: the metadata store.
        last_write: the service's last-write times per ledger (monotonic seconds).
        interval: seconds between scans.
        grace: seconds a recently written ledger is protected.
        clock: monotonic clock (tests pass their own).
    """

    def __init__(
        self,
        core: CollectableCore,
        store: MetadataStore,
        last_write: MutableMapping[int, float],
        *,
        interval: float,
        grace: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._store = store
        self._last_write = last_write
        self._interval = interval
        self._grace = grace
        self._clock = clock
        self._started = clock()
        self.deleted_total = 0

    async def collect_once(self) -> list[int]:
        """Run one scan; return the ids deleted."""
        on_bookie = list(self._core.ledgers())
        if not on_bookie:
            return []
        in_metadata = _ledger_ids(await self._store.children(LEDGERS))
        candidates = collectable(
            on_bookie,
            in_metadata,
            self._last_write,
            now=self._clock(),
            started=self._started,
            grace=self._grace,
        )
        confirmed = [c for c in candidates if await self._store.exists(ledger_path(c)) is None]
        if confirmed:
            await self._core.delete_ledgers(confirmed)
            for ledger_id in confirmed:
                self._last_write.pop(ledger_id, None)
            self.deleted_total += len(confirmed)
            log.info("deleted ledgers absent from metadata", ledger_ids=confirmed)
        return confirmed

    async def run(self, stop: asyncio.Event) -> None:
        """Scan every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self._interval)
            except TimeoutError:
                pass
            else:
                return
            try:
                await self.collect_once()
            except WalogError as exc:
                # The metadata store is unreachable: collect nothing, try next round.
                log.warning("ledger gc skipped", error=str(exc))


__all__ = ["CollectableCore", "LedgerCollector", "collectable"]

"""Garbage collection: drop deleted ledgers, and copies of closed ledgers nobody reads.

A ledger's metadata is created before any of its entries reaches a bookie (a writer sends
its first add only once the store acknowledged the create; a recovery or a fence starts
from metadata it read), and it is deleted only when the ledger is deleted. So a ledger this
bookie stores whose metadata is absent was deleted, provided the absence is read *after*
the bookie listed the ledger and from a view of the store that includes every change
acknowledged before that. Each scan therefore:

1. lists the ledgers stored here;
2. lists the ledgers in the metadata store: those absent are candidates;
3. syncs its metadata session (:meth:`MetadataStore.sync`: the ZooKeeper server it reads
   from catches up with the leader; SQLite reads are current anyway) and reads each
   candidate's record once more, just before deleting it. A candidate whose record shows
   up was created meanwhile or read from a lagging view: it is kept.

A ledger created elsewhere after step 1 has no entries in the list, so it cannot be a
candidate; one created before step 1 had its create acknowledged before its first entry
arrived here, hence before the sync, so the read of step 3 sees it unless it was deleted.
Ledger ids are never reused, so a record once gone never comes back under the same id.
That proof replaces waiting for a long quiet time after the last write (BookKeeper's
bookies decide from the same two lists and the same re-read of each candidate). A short
margin remains (``grace``, ``--gc-grace-s``): a ledger written to within it, or since less
than that after the bookie started, is kept. The proof does not need it; it covers a
client that breaks the create-before-first-add order (another implementation of the
protocol, a bug), and costs seconds only: a ledger whose metadata was deleted is rarely
still being written.

While a disk is above the warning mark the bookie also runs a scan at once, between the
timed ones (bookie/space.py); scans never overlap.

A second, rarer scan (every ``stray_interval`` seconds) drops *stray copies*: entries of a
CLOSED ledger none of whose fragments names this bookie. They are left by an auto-recovery
that copied a fragment here and then lost its compare-and-set to a writer or another
worker, or by a bookie that was replaced while it was down. No reader ever asks this bookie
for them (readers follow the ensembles) and a closed ledger's ensembles change only by
auto-recovery swapping a lost bookie for a new one, so the copy can only become live again
through such a swap, which writes its entries anew. A copy written to within
``stray_grace`` seconds is kept (an auto-recovery may be copying it now and not have swapped
yet), and the metadata is read once more just before the copy is deleted (BookKeeper's
bookies collect over-replicated ledgers by the same rule).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Protocol

import structlog

from walog.errors import WalogError
from walog.metadata.layout import LEDGERS, LedgerMetadata, ledger_path
from walog.metadata.store import MetadataStore, NodeNotFoundError

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


def is_stray(metadata: LedgerMetadata, bookie_id: str) -> bool:
    """Whether a copy of the ledger on ``bookie_id`` is stray: the ledger is closed and no
    fragment's ensemble names the bookie."""
    return metadata.is_closed and all(bookie_id not in bookies for _, bookies in metadata.ensembles)


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
    """Periodically deletes ledgers whose metadata is gone, and stray copies.

    Args:
        core: the storage core (``ledgers()``, ``delete_ledgers(ids)``).
        store: the metadata store.
        last_write: the service's last-write times per ledger (monotonic seconds).
        interval: seconds between scans.
        grace: seconds a recently written ledger is protected.
        bookie_id: this bookie's id, as ensembles name it (stray copies are looked for only
            with one).
        stray_interval: seconds between scans for stray copies (0: never).
        stray_grace: seconds a recently written copy is protected from the stray scan.
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
        bookie_id: str | None = None,
        stray_interval: float = 0.0,
        stray_grace: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._store = store
        self._last_write = last_write
        self._interval = interval
        self._grace = grace
        self._bookie_id = bookie_id
        self._stray_interval = stray_interval
        self._stray_grace = stray_grace
        self._clock = clock
        self._started = clock()
        self._next_stray_scan = self._started + stray_interval
        self._scanning = asyncio.Lock()
        self.deleted_total = 0
        self.strays_deleted_total = 0

    async def collect_once(self) -> list[int]:
        """Run one scan; return the ids deleted. Scans never overlap: a call made while
        one runs waits for it, then scans anew."""
        async with self._scanning:
            return await self._collect()

    async def _collect(self) -> list[int]:
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
        if not candidates:
            return []
        # One sync covers every candidate: each one's create, if any, was acknowledged
        # before the listing above, so before the sync.
        await self._store.sync(LEDGERS)
        confirmed = [c for c in candidates if await self._store.exists(ledger_path(c)) is None]
        if confirmed:
            await self._delete(confirmed)
            self.deleted_total += len(confirmed)
            log.info("deleted ledgers absent from metadata", ledger_ids=confirmed)
        return confirmed

    async def collect_strays_once(self) -> list[int]:
        """Run one scan for stray copies; return the ids of the ledgers whose copy was
        deleted. Reads the metadata of every ledger stored here and not written within
        ``stray_grace``, then once more for each stray one just before deleting it."""
        bookie_id = self._bookie_id
        if bookie_id is None:
            return []
        now = self._clock()
        quiet = [
            ledger_id
            for ledger_id in self._core.ledgers()
            if now - self._last_write.get(ledger_id, self._started) >= self._stray_grace
        ]
        strays = [c for c in quiet if await self._stray(c, bookie_id)]
        confirmed = [c for c in strays if await self._stray(c, bookie_id)]
        if confirmed:
            await self._delete(confirmed)
            self.strays_deleted_total += len(confirmed)
            log.info("deleted stray copies of closed ledgers", ledger_ids=confirmed)
        return confirmed

    async def _stray(self, ledger_id: int, bookie_id: str) -> bool:
        try:
            raw, _ = await self._store.get(ledger_path(ledger_id))
        except NodeNotFoundError:
            return False  # deleted: the other scan's business
        try:
            metadata = LedgerMetadata.from_json(raw)
        except (ValueError, KeyError, TypeError) as exc:
            # What cannot be read is never taken as a reason to delete.
            log.warning(
                "unreadable ledger metadata kept out of gc", ledger_id=ledger_id, error=repr(exc)
            )
            return False
        return is_stray(metadata, bookie_id)

    async def _delete(self, ledger_ids: list[int]) -> None:
        await self._core.delete_ledgers(ledger_ids)
        for ledger_id in ledger_ids:
            self._last_write.pop(ledger_id, None)

    async def run(self, stop: asyncio.Event) -> None:
        """Scan every ``interval`` seconds (and for stray copies every ``stray_interval``)
        until ``stop`` is set."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self._interval)
            except TimeoutError:
                pass
            else:
                return
            try:
                await self.collect_once()
                if self._stray_interval > 0 and self._clock() >= self._next_stray_scan:
                    self._next_stray_scan = self._clock() + self._stray_interval
                    await self.collect_strays_once()
            except WalogError as exc:
                # The metadata store is unreachable: collect nothing, try next round.
                log.warning("ledger gc skipped", error=str(exc))


__all__ = ["CollectableCore", "LedgerCollector", "collectable", "is_stray"]

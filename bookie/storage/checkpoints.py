"""Checkpoints of the storage engine: the write cache into the entry logs and the index, the
journal mark forward, the journal files before the mark deleted.

:class:`Checkpointer` holds what the engine keeps in memory only (the write cache and the
ledgers whose state changed since the last checkpoint) and takes the checkpoints: when asked
(:meth:`Checkpointer.checkpoint`, a close), soon after the write cache fills, and every
``checkpoint_interval_s`` (:func:`checkpoint_wait` spreads them apart).

Ordering rules that make it crash-safe:

- Replay starts at the mark of the last checkpoint, so a record journaled before the mark
  survives a crash only through what that checkpoint persisted. A checkpoint therefore
  freezes the write cache, takes the dirty ledgers and queues the journal barrier whose
  position becomes the mark in one synchronous step: with no await between them, every
  record journaled before the mark has its entries in the frozen cache and its ledger among
  the dirty ones. The disk probe after a failed checkpoint runs before that step.
- Nothing of a failed checkpoint was committed: its frozen entries and dirty ledgers go
  back, and the next checkpoint takes them again. Until one succeeds :attr:`failure` is
  set, and the engine refuses plain adds (they would only pile up in memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Callable

import structlog

from bookie.storage.config import StorageConfig
from bookie.storage.entry_storage import EntryStorage
from bookie.storage.environment import Workers
from bookie.storage.journal import Journal
from bookie.storage.journal_files import StorageIOError
from bookie.storage.tombstones import Tombstones
from bookie.storage.write_cache import CachedEntry, WriteCache
from walog import mutations

_log = structlog.get_logger(__name__)


class Checkpointer:
    """The write cache of one storage engine and its checkpoints.

    Args:
        config: the engine's settings (cache size, checkpoint interval).
        journal: the engine's journal: its barriers give the marks.
        writer: the storage thread (one job at a time, :attr:`lock` held).
        storage: the open entry storage (raises StorageIOError once it is closed).
        states: the stored records of the given ledgers' states (those still known).
        damaged_entries: the engine's stored copies found damaged, by ledger: a cached new
            copy of one overwrites its row, and leaves this set once persisted.
    """

    def __init__(
        self,
        config: StorageConfig,
        journal: Journal,
        writer: Workers,
        *,
        storage: Callable[[], EntryStorage],
        states: Callable[[set[int]], dict[int, bytes]],
        tombstones: Callable[[], Tombstones],
        damaged_entries: dict[int, set[int]],
    ) -> None:
        self._config = config
        self._journal = journal
        self._writer = writer
        self._storage = storage
        self._states = states
        self._tombstones = tombstones
        self._damaged_entries = damaged_entries
        self.cache = WriteCache()
        """Entries received since the last checkpoint began (adds insert here)."""
        self.dirty: set[int] = set()
        """Ledgers whose state changed since the last checkpoint began."""
        self._flushing: WriteCache | None = None
        self.lock = asyncio.Lock()
        """Held by a checkpoint, and by every other job of the storage thread (compaction
        steps, deletions, the close), so that they run between checkpoints."""
        self._wanted = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.failure: StorageIOError | None = None
        """The error of the last checkpoint if it failed (entry log or index write: a full
        or failing disk); cleared by the next checkpoint that succeeds."""
        #: Called on the loop after every checkpoint with the number of entries it wrote.
        self.listeners: list[Callable[[int], None]] = []
        #: Called on the loop when a checkpoint failed to write the entry logs or index.
        self.failure_listeners: list[Callable[[], None]] = []

    def cached(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        """The entry if it is in memory: in the write cache or in the one being persisted."""
        entry = self.cache.get(ledger_id, entry_id)
        if entry is None and self._flushing is not None:
            entry = self._flushing.get(ledger_id, entry_id)
        return entry

    def cached_ids(self, ledger_id: int, first: int, last: int) -> list[int]:
        """The ids in ``first..last`` of the ledger's entries in memory (the write cache and
        the one being persisted), in no order."""
        ids: list[int] = []
        for cache in (self.cache, self._flushing):
            if cache is not None:
                ids += cache.ids_in(ledger_id, first, last)
        return ids

    @property
    def unwritten_bytes(self) -> int:
        """Bytes of entries taken and not yet in an entry log: the write cache and the one
        being persisted (what the data disk is still to receive)."""
        flushing = self._flushing
        return self.cache.bytes + (flushing.bytes if flushing is not None else 0)

    def want(self) -> None:
        """Take a checkpoint soon (the write cache is full)."""
        self._wanted.set()

    async def idle(self) -> None:
        """Return once no checkpoint holds a frozen write cache (the adds' memory bound)."""
        await self._idle.wait()

    # -- the periodic loop ----------------------------------------------------------------

    def start(self) -> None:
        """Start the periodic checkpoints."""
        self._loop_task = asyncio.create_task(self._run(), name="bookie-checkpoint")

    async def stop(self) -> None:
        """Stop the periodic checkpoints; returns once a checkpoint under way finished."""
        self._stopping = True
        if self._loop_task is not None:
            # Not cancelled: a checkpoint in its storage thread would finish anyway, and
            # its cache generation must not be merged back as if it had failed.
            self._wanted.set()
            await self._loop_task

    async def _run(self) -> None:
        first = True
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                    checkpoint_wait(self._config.checkpoint_interval_s, first)
                ):
                    await self._wanted.wait()
            first = False
            self._wanted.clear()
            if self._stopping:
                return  # the engine's close takes the final checkpoint
            failing = self.failure is not None
            try:
                await self.checkpoint()
            except StorageIOError as exc:
                # One line per outage, not one per retry (a full disk stays full a while).
                (_log.debug if failing else _log.error)("checkpoint failed", error=str(exc))
            except Exception:
                # Keep checkpointing: a dead loop would let the journal grow forever.
                _log.exception("checkpoint failed")

    # -- one checkpoint -------------------------------------------------------------------

    async def checkpoint(self) -> None:
        """Flush the write cache to entry logs and the index, move the journal mark and
        delete the journal files before it.

        Raises:
            StorageIOError: the entry logs or the index could not be written (recorded in
                :attr:`failure` until a checkpoint succeeds), or the storage is closed.
        """
        started = time.monotonic()
        async with self.lock:
            storage = self._storage()
            probe_first = not mutations.enabled("checkpoint_probes_after_freezing")
            if self.failure is not None and probe_first:
                # After a failed checkpoint: proof that the disk takes writes again, before
                # anything is frozen (an await between the freeze and the barrier would let
                # records be journaled before the mark and persisted by no checkpoint).
                try:
                    await self._writer.run(storage.probe)
                except StorageIOError as exc:
                    self._failed(exc)
                    raise
            # One synchronous step: freeze the write cache, take the dirty ledgers and the
            # deleted ones, and queue the barrier whose position becomes the mark. Every
            # record journaled before the mark is then in what this checkpoint persists
            # (its entries in the frozen cache, its ledger's state among the dirty ones, a
            # deletion among the tombstones).
            frozen, self.cache = self.cache, WriteCache()
            dirty, self.dirty = self.dirty, set()
            tombstones = self._tombstones()
            self._flushing = frozen
            self._idle.clear()
            barrier = None if not probe_first else self._journal.barrier()
            try:
                if barrier is None:
                    if self.failure is not None:
                        await self._writer.run(storage.probe)
                    barrier = self._journal.barrier()
                mark = await barrier
                states = self._states(dirty)
                # Re-replicated copies of entries whose stored copy is damaged: their rows
                # are overwritten (a plain checkpoint keeps a row that exists).
                damaged = self._damaged_entries
                replace = {
                    (ledger_id, entry_id)
                    for ledger_id in frozen.ledgers
                    for entry_id in damaged.get(ledger_id, ())
                    if frozen.contains(ledger_id, entry_id)
                }
                written = await self._writer.run(
                    functools.partial(storage.checkpoint, replace=replace, tombstones=tombstones),
                    frozen.pieces(),
                    states,
                    mark,
                )
                for ledger_id, entry_id in replace:
                    damaged[ledger_id].discard(entry_id)
            except BaseException as exc:
                # Nothing was committed: the next checkpoint takes these again.
                for ledger_id, unit in frozen.pieces():
                    self.cache.add(ledger_id, unit)
                self.dirty |= dirty
                if isinstance(exc, StorageIOError):
                    self._failed(exc)
                raise
            finally:
                self._flushing = None
                self._idle.set()
            try:
                await self._writer.run(self._journal.delete_before, mark.file_seq)
            except OSError as exc:
                # Harmless for correctness (replay starts at the mark); retried next time.
                _log.warning("old journal files not deleted", error=str(exc))
        if self.failure is not None:
            _log.warning("checkpoint succeeded again", entries=written)
            self.failure = None
        for listener in self.listeners:
            listener(written)
        _log.debug(
            "checkpoint",
            entries=written,
            mark=tuple(mark),
            seconds=round(time.monotonic() - started, 3),
        )

    def _failed(self, exc: StorageIOError) -> None:
        """A checkpoint failed: plain adds are refused until one succeeds."""
        self.failure = exc
        for on_failure in self.failure_listeners:
            on_failure()


def checkpoint_wait(interval: float, first: bool) -> float:
    """Seconds until a bookie's next periodic checkpoint: ``interval`` give or take a tenth,
    and the first one at a random point of the first interval (at least half of it in).

    Bookies started together (a cluster coming up, a test harness, one host's bookies)
    would otherwise checkpoint in step, every one writing its cache to disk at the same
    moment. Spread apart, a checkpoint slows one bookie of a write quorum at a time, and the
    ack quorum is made of the others.
    """
    return interval * (random.uniform(0.5, 1.0) if first else random.uniform(0.9, 1.1))


__all__ = ["Checkpointer", "checkpoint_wait"]

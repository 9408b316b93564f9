"""The bookie storage engine facade: what the gRPC server calls.

:class:`BookieCore` ties the journal (durability, group commit), the write cache and
entry storage (entry logs + LMDB index) and the per-ledger state (master key, fence, LAC,
sync cursor) together. Every method runs on the event loop; blocking work runs in
dedicated threads (the journal thread, one storage writer thread, a small reader pool).

Ordering rules that make it crash-safe:

- A change is acknowledged only after its journal record completed: PERSISTENT adds,
  first master keys, fences and deletions after the group's fdatasync; VOLATILE adds after
  the ``write()`` (docs/protocol.md, "Journal before acknowledgement").
- An entry enters the write cache and its journal record is queued in the same
  synchronous step, so a checkpoint that freezes the cache and then queues a journal
  barrier gets a mark that no frozen entry's record lies beyond.
- The sync cursor moves only when a journal sync covered the entries, or by a piggybacked
  LAC; on open every replayed record has just been synced, so it never goes backwards.
- Each open draws a new :attr:`BookieCore.incarnation`, sent with every add and force
  answer: unsynced VOLATILE entries do not survive a crash, so a writer must learn of a
  restart before it counts an acknowledgement of this incarnation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import operator
import secrets
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import structlog

from bookie.storage.checkpoints import Checkpointer
from bookie.storage.compaction import Compactor
from bookie.storage.config import StorageConfig
from bookie.storage.damaged_copies import DamagedCopies
from bookie.storage.entry_storage import READ_ENTRY_OVERHEAD, EntryStorage, StoredRecord
from bookie.storage.environment import LOCAL_ENV, StorageEnv
from bookie.storage.fastpath import refused_entries, unpack_entries
from bookie.storage.fences import Fences
from bookie.storage.group_reports import GroupReports
from bookie.storage.held_ranges import EntryRange, merged, ranges_of, without
from bookie.storage.journal import Journal
from bookie.storage.journal_files import JournalMark, StorageIOError
from bookie.storage.journal_records import (
    add_header,
    delete_record,
    key_record,
    lac_record,
)
from bookie.storage.lac_polls import LacPolls
from bookie.storage.ledger_state import LedgerState
from bookie.storage.replay import load_store
from bookie.storage.write_cache import CachedEntry, pack_unit, starts_of
from walog._tasks import cancel_and_wait
from walog.latency import StageLatencies
from walog.wire.durability import Durability
from walog.wire.packing import ENTRY_HEADER, PackedEntry
from walog.wire.status import Status

_log = structlog.get_logger(__name__)


_MIB = 1024 * 1024
_T = TypeVar("_T")
_BACKPRESSURE_FACTOR = 2  # adds wait for a running checkpoint above this x write_cache_bytes


@dataclasses.dataclass
class BookieStats:
    """Counters of one storage engine since it was opened."""

    journal_syncs: int = 0
    journal_groups: int = 0
    journal_bytes: int = 0
    entries_added: int = 0
    bytes_written: int = 0
    duplicate_adds: int = 0
    checkpoints: int = 0
    entries_checkpointed: int = 0
    replayed_records: int = 0
    replayed_bytes: int = 0
    replay_seconds: float = 0.0
    entry_logs_deleted: int = 0
    entry_logs_compacted: int = 0
    compaction_read_errors: int = 0
    damaged_reads: int = 0


class BookieCore:
    """A bookie's storage engine. Create with :meth:`open`, end with :meth:`close`."""

    def __init__(self, config: StorageConfig, env: StorageEnv = LOCAL_ENV) -> None:
        """Use :meth:`open`."""
        self.config = config
        self.incarnation = new_incarnation()
        """This opening of the storage, a random nonzero 64-bit id: every add and force
        answer carries it, and a writer that sees it change knows that the bookie
        restarted (and may have lost the VOLATILE entries it had not synced)."""
        self.stats = BookieStats()
        self.latencies = StageLatencies()
        """Where add time goes, by stage (walog/latency.py); reported by ``Info``."""
        self.read_only_reason: str | None = None
        """Set while the bookie is read-only by disk usage (bookie/disks.py): plain adds
        are answered READ_ONLY; reads, fences and recovery writes are still served."""
        self._states: dict[int, LedgerState] = {}
        self.damage = DamagedCopies()
        """Damaged ledgers and entry copies found since start (bookie/storage/damaged_copies.py)."""
        self._lac_polls = LacPolls(self.lac)
        self._writer = env.workers(1, "bookie-storage")
        self._readers = env.workers(2, "bookie-read")
        self._storage: EntryStorage | None = None
        self.compactor = Compactor(config.compaction, self.in_storage)
        """Minor and major compaction of partly dead entry logs (bookie/storage/compaction.py)."""
        self._compaction: asyncio.Task[None] | None = None
        self._closed = False
        self.journal_reports = GroupReports(
            self.stats,
            self.latencies,
            state_of=lambda ledger_id: self._states.get(ledger_id),
            touched=lambda ledger_id: self.checkpoints.dirty.add(ledger_id),
        )
        """Counters, latencies and group sizes of the journal's group commits, and the sync
        cursors they move (bookie/storage/group_reports.py)."""
        self.journal = Journal(
            config.journal_path,
            file_bytes=config.journal_file_bytes,
            group_wait_s=config.group_wait_s,
            group_max_bytes=config.group_max_bytes,
            flush_interval_s=config.volatile_flush_interval_s,
            on_group=self.journal_reports.on_group,
            files=env.files,
            runner=env.journal_runner,
            blocking=self._writer.run,
        )
        self.fences = Fences(self.journal, lambda ledger_id: self.checkpoints.dirty.add(ledger_id))
        """Fences waiting for their sync, and the ledgers deleted here (fenced for good)."""
        self.checkpoints = Checkpointer(
            config,
            self.journal,
            self._writer,
            storage=self._require_storage,
            states=self._state_records,
            tombstones=lambda: self.fences.tombstones.copy(),
            damaged_entries=self.damage.entries,
        )
        """The write cache and its checkpoints (bookie/storage/checkpoints.py); while its
        ``failure`` is set, plain adds are refused."""
        self.checkpoints.listeners.append(self._counted)

    # -- life cycle -------------------------------------------------------------------------

    @classmethod
    async def open(cls, config: StorageConfig, env: StorageEnv = LOCAL_ENV) -> BookieCore:
        """Open the store: load the index, replay the journal after the last checkpoint
        (cutting a torn tail), then start the journal thread and the checkpoint task.
        ``env``: the surroundings (a bookie process's own disks and threads by default)."""
        core = cls(config, env)
        try:
            loaded = await core._writer.run(load_store, config, env)
        except BaseException as exc:
            core._shutdown_threads()
            if isinstance(exc, OSError):
                raise StorageIOError(
                    f"cannot open bookie storage in {config.data_dir}: {exc}"
                ) from exc
            raise
        core._storage = loaded.storage
        core._states = loaded.states
        core.damage.ledgers = loaded.damaged
        core.fences.tombstones = loaded.tombstones
        core.checkpoints.cache = loaded.cache
        core.checkpoints.dirty = loaded.touched
        core.stats.replayed_records = loaded.replayed_records
        core.stats.replayed_bytes = loaded.replayed_bytes
        core.stats.replay_seconds = loaded.replay_s
        try:
            await core.journal.start(loaded.next_journal_seq)
        except BaseException:
            await core._writer.run(loaded.storage.close)
            core._shutdown_threads()
            raise
        if loaded.deleted:
            # Before any checkpoint: a ledger recreated after its deletion has its new
            # entries in the write cache only, so this drops only what came before.
            await core._writer.run(loaded.storage.delete_ledgers, loaded.deleted)
        core.checkpoints.start()
        core._compaction = asyncio.create_task(core.compactor.run(), name="bookie-compaction")
        if core.checkpoints.cache.bytes >= config.write_cache_bytes:
            core.checkpoints.want()  # a long replay: move the mark forward soon
        return core

    async def close(self) -> None:
        """Stop accepting requests, checkpoint, sync and close the journal and index."""
        if self._closed:
            return
        self._closed = True
        await self._stop_background()
        try:
            await self.checkpoints.checkpoint()
        except StorageIOError as exc:
            _log.error("final checkpoint failed", error=str(exc))
        await self.journal.stop(sync=True)
        await self._close_storage()

    async def abandon(self) -> None:
        """Stop as a crash would: no checkpoint, no final journal sync, queued records
        dropped. What was written stays in the files (tests of recovery)."""
        if self._closed:
            return
        self._closed = True
        await self._stop_background()
        await self.journal.stop(sync=False)
        await self._close_storage()

    async def _stop_background(self) -> None:
        self._lac_polls.release()
        if self._compaction is not None:
            await cancel_and_wait(self._compaction)
        await self.checkpoints.stop()

    async def _close_storage(self) -> None:
        async with self.checkpoints.lock:
            storage = self._storage
            self._storage = None
            if storage is not None:
                await self._writer.run(storage.close)
        self._shutdown_threads()

    def _shutdown_threads(self) -> None:
        self._writer.shutdown()
        self._readers.shutdown()

    def _require_storage(self) -> EntryStorage:
        if self._storage is None:
            raise StorageIOError("bookie storage is closed")
        return self._storage

    @property
    def storage_failure(self) -> str | None:
        """Why the storage cannot take adds now, or None: a failed journal (for good), or a
        failed checkpoint (until one succeeds)."""
        if self.journal.failed is not None:
            return f"journal failed: {self.journal.failed}"
        if self.checkpoints.failure is not None:
            return f"checkpoint failed: {self.checkpoints.failure}"
        return None

    @property
    def read_only(self) -> bool:
        """True while plain adds are refused: read-only by disk usage, a failed checkpoint,
        or a failed journal (which refuses every write until a restart)."""
        return self.read_only_reason is not None or self.storage_failure is not None

    def _refuses_plain_adds(self) -> bool:
        """Read-only by disk usage, or a checkpoint failed (a failed journal refuses every
        write, with IO_ERROR)."""
        return self.read_only_reason is not None or self.checkpoints.failure is not None

    # -- writes -----------------------------------------------------------------------------

    async def add(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        data: bytes,
        digest: int,
        master_key: bytes,
        *,
        recovery: bool,
        durability: Durability,
    ) -> tuple[Status, int]:
        """Store one entry; returns ``(status, last_add_synced)`` (see :meth:`add_batch`)."""
        ((status, _, last_add_synced),) = await self.add_batch(
            ledger_id,
            master_key,
            [PackedEntry(entry_id, lac, digest, bytes(data))],
            recovery=recovery,
            durability=durability,
        )
        return status, last_add_synced

    async def add_batch(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[PackedEntry],
        *,
        recovery: bool,
        durability: Durability,
        packed: bytes | None = None,
    ) -> list[tuple[Status, list[int], int]]:
        """Store entries (:class:`PackedEntry`) of one ledger; returns answers
        ``(status, entry_ids, last_add_synced)``, each entry in exactly one of them.

        The new entries share one journal item: PERSISTENT ones are answered after the
        group holding them was synced, VOLATILE ones after it was written. A duplicate of a
        stored entry is OK and keeps the first copy (a PERSISTENT one still waits for a
        sync, since the first copy may not be synced yet). Refusals: BAD_REQUEST (negative
        ids, ``lac`` not below ``entry_id``), ENTRY_TOO_LARGE (payload over
        ``max_entry_bytes``), DIGEST_MISMATCH, UNAUTHORIZED (another master key), FENCED
        (fenced ledger, not a recovery write), IO_ERROR (disk failure or closed).

        ``packed``: the entries as the client packed them (``AddBatch.entries``); journaled
        as they are when every entry is new and valid, saving a repack.
        """
        answers: dict[Status, list[int]] = {}
        if self._closed or self.journal.failed is not None:
            return [(Status.IO_ERROR, [e.entry_id for e in entries], -1)]
        if not recovery and self._refuses_plain_adds():
            # A recovery write is still taken: it must reach every bookie of a write quorum.
            return [(Status.READ_ONLY, [e.entry_id for e in entries], -1)]
        refused_ids = refused_entries(ledger_id, entries, self.config.max_entry_bytes)
        valid: Sequence[PackedEntry] = entries
        if refused_ids:
            for entry_id, status in refused_ids.items():
                answers.setdefault(status, []).append(entry_id)
            valid = [entry for entry in entries if entry.entry_id not in refused_ids]
        refused = [(status, ids, -1) for status, ids in answers.items()]
        if not valid:
            return refused
        ids = [e.entry_id for e in valid]
        if self.checkpoints.cache.bytes >= _BACKPRESSURE_FACTOR * self.config.write_cache_bytes:
            # Memory bound: wait for the running checkpoint to free the frozen cache.
            await self.checkpoints.idle()
            if self._closed:
                return [*refused, (Status.IO_ERROR, ids, -1)]
            if not recovery and self._refuses_plain_adds():
                # Turned read-only meanwhile: taken now, the adds held back here (as many as
                # admission lets in) would fill the disk's reserve and the journal fail.
                return [*refused, (Status.READ_ONLY, ids, -1)]
        state, status = self._ledger_for_write(ledger_id, master_key, adopt_key=recovery)
        if state is None:
            return [*refused, (status, ids, -1)]
        if state.fenced and not recovery:
            return [*refused, (Status.FENCED, ids, state.last_add_synced)]
        if len(valid) != len(entries):
            packed = None  # the refused entries must not reach the journal
        waiter = self._store(state, valid, packed, volatile=durability is Durability.VOLATILE)
        if waiter is not None:
            try:
                await waiter
            except StorageIOError:
                return [*refused, (Status.IO_ERROR, ids, state.last_add_synced)]
        return [*refused, (Status.OK, ids, state.last_add_synced)]

    def _store(
        self,
        state: LedgerState,
        entries: Sequence[PackedEntry],
        packed: bytes | None,
        *,
        volatile: bool,
    ) -> asyncio.Future[Any] | None:
        """Put valid entries in the write cache and queue their journal record, in one
        synchronous step (see the ordering rules above); the future to await before they
        may be acknowledged, if any. ``packed``: the same entries, packed."""
        ledger_id = state.ledger_id
        checkpoints = self.checkpoints
        cache = checkpoints.cache
        # Nothing above the highest entry id seen is cached or stored: a batch of new
        # ids, ascending (what a writer sends), is stored and cached whole, as the unit
        # it came in, without a lookup per entry.
        highest = state.last_entry_id
        ids = [entry.entry_id for entry in entries]
        if ids[0] > highest and (len(ids) == 1 or all(map(operator.lt, ids, ids[1:]))):
            stored: Sequence[PackedEntry] = entries
            sizes = [len(entry.data) for entry in entries]
            starts, stop = starts_of(sizes)
            if packed is None or len(packed) != stop:
                packed = _packed(entries)
            cache.add_packed(ledger_id, packed, ids, starts)
            highest = ids[-1]
        else:
            stored, new = _new_entries(state, entries, self._has_entry, cache.contains)
            if new:
                cache.add(ledger_id, pack_unit(new))
            packed = None if len(stored) != len(entries) else packed
            ids = [entry.entry_id for entry in stored]
            sizes = [len(entry.data) for entry in stored]
            highest = max(highest, *ids) if ids else highest
        lac = max((entry.lac for entry in stored), default=-1)
        size = sum(sizes)
        duplicates = len(entries) - len(stored)
        self.stats.duplicate_adds += duplicates
        self.stats.entries_added += len(stored)
        self.stats.bytes_written += size
        if cache.bytes >= self.config.write_cache_bytes:
            checkpoints.want()
        if stored:
            state.note_entry(highest)
            if volatile:
                state.sync.advance_to(lac)
            if state.raise_lac(lac):
                self._lac_polls.wake(ledger_id)
            self.checkpoints.dirty.add(ledger_id)
            if packed is None:
                packed = _packed(stored)
            # Tagged for the sync cursor: the group report says when these were synced.
            return self.journal.append(
                (add_header(ledger_id, volatile), packed), sync=not volatile, tag=(ledger_id, ids)
            )
        if duplicates and not volatile:
            # The first copies may still wait for their sync: do not ack before it. (With
            # new records, their sync covers every earlier record too.)
            return self.journal.barrier()
        return None

    def _ledger_for_write(
        self, ledger_id: int, master_key: bytes, *, adopt_key: bool = True
    ) -> tuple[LedgerState | None, Status]:
        """The ledger's state, created (key journaled with a sync before any ack of a
        later record) on first contact; None with UNAUTHORIZED on another key.

        A ledger rebuilt from the entry logs (``--rebuild-index``) lost its key and fence
        with the old index: a fence or a recovery write (``adopt_key``) gives it the key
        they present, as a new ledger's first write does; a plain add gets IO_ERROR, so its
        writer moves to another bookie (the ledger may have been fenced and closed before:
        no plain add may be acknowledged here)."""
        state = self._states.get(ledger_id)
        if state is None:
            if ledger_id in self.damage.ledgers:
                return None, Status.IO_ERROR  # its key and fence are unknown
            deleted = self.fences.is_deleted(ledger_id)
            if deleted and not adopt_key:
                return None, Status.FENCED
            # Records first, the state after: a queueing that raises leaves no state behind
            # (a deleted ledger's unfenced state would take a plain add).
            state = LedgerState(ledger_id, bytes(master_key))
            self.journal.append((key_record(ledger_id, state.master_key),), sync=True, wait=False)
            if deleted:
                self.fences.fence(state)
            self._states[ledger_id] = state
            self.checkpoints.dirty.add(ledger_id)
            return state, Status.OK
        if not state.master_key:
            if not adopt_key:
                return None, Status.IO_ERROR
            state.master_key = bytes(master_key)
            self.checkpoints.dirty.add(ledger_id)
            self.journal.append((key_record(ledger_id, state.master_key),), sync=True, wait=False)
            return state, Status.OK
        if not hmac.compare_digest(state.master_key, bytes(master_key)):
            return None, Status.UNAUTHORIZED
        return state, Status.OK

    def _has_entry(self, state: LedgerState, entry_id: int) -> bool:
        if entry_id in self.damage.of(state.ledger_id):
            return False  # a damaged copy: the new one replaces it
        if self._cached(state.ledger_id, entry_id) is not None:
            return True
        if entry_id > state.last_entry_id or self._storage is None:
            return False
        return self._storage.contains(state.ledger_id, entry_id)

    def _cached(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        return self.checkpoints.cached(ledger_id, entry_id)

    def update_lac(self, ledger_id: int, lac: int, master_key: bytes) -> Status:
        """An explicit LAC from an idle writer: LAC = max(LAC, lac); wakes long polls."""
        if self._closed:
            return Status.IO_ERROR
        if lac < -1:
            return Status.BAD_REQUEST
        state = self._states.get(ledger_id)
        if state is None:
            return self.damage.unknown(ledger_id)
        if not state.master_key:
            return Status.IO_ERROR  # rebuilt: key unknown until a fence or recovery write
        if not hmac.compare_digest(state.master_key, bytes(master_key)):
            return Status.UNAUTHORIZED
        if state.raise_lac(lac):
            self.checkpoints.dirty.add(ledger_id)
            self.journal.append((lac_record(ledger_id, lac),), sync=False, wait=False)
            self._lac_polls.wake(ledger_id)
        return Status.OK

    async def force(self, ledger_id: int, master_key: bytes) -> tuple[Status, int]:
        """Sync everything received so far; returns ``(status, last_add_synced)``."""
        if self._closed:
            return Status.IO_ERROR, -1
        state = self._states.get(ledger_id)
        if state is None:
            return self.damage.unknown(ledger_id), -1
        if not state.master_key:
            return Status.IO_ERROR, -1  # rebuilt: key unknown (see _ledger_for_write)
        if not hmac.compare_digest(state.master_key, bytes(master_key)):
            return Status.UNAUTHORIZED, -1
        try:
            await self.journal.barrier()
        except StorageIOError:
            return Status.IO_ERROR, state.last_add_synced
        return Status.OK, state.last_add_synced

    async def fence(self, ledger_id: int, master_key: bytes) -> tuple[Status, int, int]:
        """Fence the ledger, durably, before answering ``(status, lac, last_entry_id)``.

        Only the first fence writes (and syncs) a FENCE record; fences arriving while it is
        in the journal wait for that same sync, and fences of a durably fenced ledger
        answer at once. An unknown ledger is created with ``master_key``; another key is
        UNAUTHORIZED.
        """
        if self._closed or self.journal.failed is not None:
            return Status.IO_ERROR, -1, -1
        state, status = self._ledger_for_write(ledger_id, master_key)
        if state is None:
            return status, -1, -1
        if not state.fenced:
            self.fences.fence(state)
        if not await self.fences.synced(ledger_id):
            return Status.IO_ERROR, -1, -1
        return Status.OK, state.lac, state.last_entry_id

    # -- reads ------------------------------------------------------------------------------

    async def read(
        self, ledger_id: int, first: int, last: int, max_bytes: int = 4 * _MIB
    ) -> tuple[Status, list[StoredRecord]]:
        """Consecutive entries from ``first`` up to ``last`` (inclusive) that exist, at
        most ``max_bytes`` of payload and :data:`READ_ENTRY_OVERHEAD` per entry (always at
        least one entry).

        NO_SUCH_LEDGER for an unknown ledger, NO_SUCH_ENTRY when ``first`` is provably
        missing, IO_ERROR when ``first`` is stored but damaged (never served), when its
        absence cannot be proven or the ledger's index rows are damaged, BAD_REQUEST for a
        negative or empty range.
        """
        state = self._states.get(ledger_id)
        if state is None:
            return self.damage.unknown(ledger_id), []
        if first < 0 or last < first:
            return Status.BAD_REQUEST, []
        records: list[StoredRecord] = []
        size = 0
        entry_id = first
        damaged = False
        while entry_id <= last and not damaged:
            cached = self._cached(ledger_id, entry_id)
            if cached is not None:
                lac, digest, data = cached
                cost = len(data) + READ_ENTRY_OVERHEAD
                if records and size + cost > max_bytes:
                    break
                records.append(StoredRecord(entry_id, lac, data, digest))
                size += cost
                entry_id += 1
                continue
            if entry_id > state.last_entry_id or self._storage is None:
                break
            budget = max(max_bytes - size, 0)
            run, damaged = await self._readers.run(
                self._storage.read_run, ledger_id, entry_id, last, budget
            )
            if damaged and len(run) < last - entry_id + 1:
                self._note_damage(ledger_id, entry_id + len(run))
            for record in run:
                cost = len(record.data) + READ_ENTRY_OVERHEAD
                if records and size + cost > max_bytes:
                    damaged = False
                    run = []
                    break
                records.append(record)
                size += cost
            if damaged:
                self.stats.damaged_reads += 1
            if not run:
                break
            entry_id = records[-1].entry_id + 1
        if not records:
            return (Status.IO_ERROR if damaged else Status.NO_SUCH_ENTRY), []
        return Status.OK, records

    async def held_entries(
        self, ledger_id: int, first: int, last: int
    ) -> tuple[Status, list[EntryRange]]:
        """The entries of ``first..last`` held, as ascending ranges, from the write cache
        and the index alone (bookie/storage/held_ranges.py). Damaged copies and the entries
        of an index row failing its checks count as missing (the row's first entry is noted
        damaged, as a read would). NO_SUCH_LEDGER, IO_ERROR or BAD_REQUEST as for reads."""
        state = self._states.get(ledger_id)
        if state is None:
            return self.damage.unknown(ledger_id), []
        if first < 0 or last < first:
            return Status.BAD_REQUEST, []
        # The cache before the index: an entry a checkpoint moves in between is in the
        # one or the other, never in neither.
        cached = self.checkpoints.cached_ids(ledger_id, first, last)
        runs: list[EntryRange] = []
        if self._storage is not None and first <= state.last_entry_id:
            runs, damaged_rows = await self._readers.run(
                self._storage.held_runs, ledger_id, first, last
            )
            for entry_id in damaged_rows:
                self._note_damage(ledger_id, entry_id)
        return Status.OK, merged([*without(runs, self.damage.of(ledger_id)), *ranges_of(cached)])

    def _note_damage(self, ledger_id: int, entry_id: int) -> None:
        if self._cached(ledger_id, entry_id) is None:  # else a new copy replaced it
            self.damage.note(ledger_id, entry_id)

    def lac(self, ledger_id: int) -> int:
        """Highest LAC known for the ledger (piggybacked or explicit); -1 if none."""
        state = self._states.get(ledger_id)
        return -1 if state is None else state.lac

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id stored for the ledger; -1 if none."""
        state = self._states.get(ledger_id)
        return -1 if state is None else state.last_entry_id

    def last_add_synced(self, ledger_id: int) -> int:
        """The ledger's sync cursor (LastAddSynced); -1 if none."""
        state = self._states.get(ledger_id)
        return -1 if state is None else state.last_add_synced

    def is_fenced(self, ledger_id: int) -> bool:
        """True once the ledger was fenced on this bookie (a deleted one stays fenced)."""
        state = self._states.get(ledger_id)
        return self.fences.is_deleted(ledger_id) if state is None else state.fenced

    def ledgers(self) -> list[int]:
        """Ids of every ledger this bookie holds (damaged ones too, so GC can drop them),
        ascending."""
        return sorted(self._states.keys() | self.damage.ledgers)

    async def wait_lac(self, ledger_id: int, previous_lac: int, timeout: float) -> int:  # noqa: ASYNC109 (long-poll timeout is part of the request)
        """Long poll: the LAC as soon as it exceeds ``previous_lac``, else at ``timeout``
        the current LAC. Woken by adds and explicit LAC updates, never by polling."""
        return await self._lac_polls.wait(ledger_id, previous_lac, timeout)

    # -- checkpoints and GC -----------------------------------------------------------------

    async def checkpoint(self) -> None:
        """Flush the write cache to entry logs and the index, move the journal mark and
        delete journal files before it. Runs on its own every ``checkpoint_interval_s``."""
        if self._closed:
            raise StorageIOError("bookie storage is closed")
        await self.checkpoints.checkpoint()

    def _state_records(self, ledger_ids: set[int]) -> dict[int, bytes]:
        """The state records of the given ledgers still known (a checkpoint's dirty ones)."""
        states = self._states
        return {i: states[i].to_bytes() for i in ledger_ids if i in states}

    def _counted(self, written: int) -> None:
        self.stats.checkpoints += 1
        self.stats.entries_checkpointed += written

    async def in_storage(self, step: Callable[[EntryStorage], _T]) -> _T:
        """Run ``step`` on the entry storage in its thread, between checkpoints (compaction
        steps); the storage counters are taken over afterwards."""
        async with self.checkpoints.lock:
            storage = self._require_storage()
            try:
                return await self._writer.run(step, storage)
            finally:
                self.stats.entry_logs_deleted = storage.logs_deleted
                self.stats.entry_logs_compacted = storage.logs_compacted
                self.stats.compaction_read_errors = storage.compaction_read_errors

    async def delete_ledgers(self, ledger_ids: Iterable[int]) -> None:
        """Forget the ledgers and reclaim their space, keeping their ids fenced for good
        (a deletion is journaled, so replay does not bring them back; entry logs left
        without live data are removed, partly dead ones wait for compaction)."""
        doomed = sorted(set(ledger_ids))
        if not doomed or self._closed:
            return
        async with self.checkpoints.lock:
            storage = self._require_storage()
            waiters = []
            self.fences.deleted(doomed)
            for ledger_id in doomed:
                self._states.pop(ledger_id, None)
                self.damage.forget(ledger_id)
                self.checkpoints.cache.drop_ledger(ledger_id)
                self.checkpoints.dirty.discard(ledger_id)
                self._lac_polls.wake(ledger_id)
                waiters.append(self.journal.append((delete_record(ledger_id),), sync=True))
            await asyncio.gather(*(w for w in waiters if w is not None))
            await self._writer.run(storage.delete_ledgers, doomed)
            self.stats.entry_logs_deleted = storage.logs_deleted
            self.stats.entry_logs_compacted = storage.logs_compacted


def _new_entries(
    state: LedgerState,
    entries: Sequence[PackedEntry],
    has_entry: Callable[[LedgerState, int], bool],
    cached: Callable[[int, int], bool],
) -> tuple[list[PackedEntry], list[PackedEntry]]:
    """The entries of a batch to journal (none stored already, each id once) and those
    of them to cache: all but the new copy of a damaged entry already cached (the first
    new copy is kept)."""
    stored: list[PackedEntry] = []
    new: list[PackedEntry] = []
    seen: set[int] = set()
    highest = state.last_entry_id
    for entry in entries:
        entry_id = entry.entry_id
        if entry_id in seen or (entry_id <= highest and has_entry(state, entry_id)):
            continue
        seen.add(entry_id)
        stored.append(entry)
        if entry_id > highest or not cached(state.ledger_id, entry_id):
            new.append(entry)
    return stored, new


def _packed(entries: Iterable[PackedEntry]) -> bytes:
    """Entries packed as a client packs them (walog/wire/packing.py)."""
    return b"".join(
        ENTRY_HEADER.pack(entry_id, lac, digest, len(data)) + data
        for entry_id, lac, digest, data in entries
    )


def new_incarnation() -> int:
    """A random nonzero 64-bit incarnation id (0 means "unknown" on the wire)."""
    return secrets.randbits(64) or 1


# The front ends (bookie/server) reach the storage through this module only: with the
# engine they get the stored-entry type and the add path's entry unpacker from here.
__all__ = [
    "BookieCore",
    "BookieStats",
    "JournalMark",
    "StoredRecord",
    "new_incarnation",
    "unpack_entries",
]

"""Opening a bookie's storage: load the index, replay the journal after the checkpoint mark.

Replay applies every intact record after the mark to the ledger states and the write cache,
in journal order. It is idempotent (bookie/storage/ledger_state.py): every piece of state
moves one way only, entries already in the index are not cached again, and a DELETE record voids the
ledger's earlier records. Blocking; the core runs it in its storage thread.

Replay runs compiled (bookie/storage/_fastreplay.c) on a bookie's own disks: the journal read
in large chunks, the records found and the entries of each ADD record checked in C, each
record cached as one unit (bookie/storage/write_cache.py), the index asked which of its
entries it holds only for a record not above the ledger's last entry, and the ledger's state
moved once per record by what its entries sum up to (every piece of it moves one way, so
the sum is what the entries give one by one). ``WALOG_PURE_PYTHON=1``, an unbuilt extension
or any other file system (the deterministic simulator's) replays in pure Python, record by
record and entry by entry; both leave the same store.

Ledgers the index cannot vouch for (bookie/storage/index_audit.py) stay unknown-but-damaged:
replay leaves them alone (their records after the mark are not applied) until a DELETE
record drops them, and the core answers IO_ERROR for them. The checkpoint mark must point
into an existing journal file: if the files from the mark on are not all there, the index
is older than the journal (an LMDB meta page damaged into an older snapshot) and the
bookie refuses to start rather than forget entries checkpointed after that snapshot.
"""

from __future__ import annotations

import dataclasses
import operator
import struct
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import lmdb
import structlog

from bookie.storage.config import StorageConfig
from bookie.storage.entry_storage import EntryStorage
from bookie.storage.environment import LOCAL_ENV, StorageEnv
from bookie.storage.fastpath import compiled_module, unpack_entries
from bookie.storage.files import LOCAL_FILES
from bookie.storage.journal_files import (
    FRAME,
    JournalMark,
    StorageIOError,
    journal_files,
    replay,
    replay_scanned,
)
from bookie.storage.journal_records import ADD_HEADER, Record, RecordKind, decode_record
from bookie.storage.ledger_state import LedgerState
from bookie.storage.tombstones import Tombstones
from bookie.storage.write_cache import WriteCache, pack_unit, repacked
from walog.wire.digest import entry_digest

_FRAME_BYTES = FRAME.size
_log = structlog.get_logger(__name__)

_REPLAY_RECORD_LIMIT = 64 * 1024 * 1024  # frame lengths above this are garbage, not entries

_fastreplay = compiled_module("bookie.storage._fastreplay")
_ADD = int(RecordKind.ADD)


@dataclasses.dataclass
class LoadedStore:
    """What :func:`load_store` found.

    Attributes:
        storage: The open entry storage (the caller closes it).
        states: Every ledger's state after replay.
        cache: Entries replayed from the journal and not yet in the index.
        touched: Ledgers whose state replay changed (to be stored at the next checkpoint).
        deleted: Ledgers deleted by replayed records (their stored data must be dropped).
        tombstones: Every ledger deleted here, from the index and replayed records: each is
            fenced for good (bookie/storage/tombstones.py).
        damaged: Ledgers whose index rows are damaged: IO_ERROR for them, never absence.
        next_journal_seq: Number of the journal file to write next.
        replayed_records: Records replayed.
        replayed_bytes: Framed bytes of the records replayed.
        replay_s: Seconds the replay took (reading, checking and applying the records).
        compiled: Whether the compiled replay ran.
    """

    storage: EntryStorage
    states: dict[int, LedgerState]
    tombstones: Tombstones
    cache: WriteCache = dataclasses.field(default_factory=WriteCache)
    touched: set[int] = dataclasses.field(default_factory=set)
    deleted: set[int] = dataclasses.field(default_factory=set)
    damaged: set[int] = dataclasses.field(default_factory=set)
    next_journal_seq: int = 1
    replayed_records: int = 0
    replayed_bytes: int = 0
    replay_s: float = 0.0
    compiled: bool = False


def load_store(config: StorageConfig, env: StorageEnv = LOCAL_ENV) -> LoadedStore:
    """Open the index, load ledger states, replay the journal from the checkpoint mark
    (cutting torn tails), recount last entry ids and delete journal files before the mark."""
    files = env.files
    journal_dir = config.journal_path
    if not files.exists(journal_dir):
        files.makedirs(journal_dir)
        files.fsync_dir(journal_dir.parent)
    storage = EntryStorage(
        config.data_dir,
        entry_log_file_bytes=config.entry_log_file_bytes,
        cache_written=config.cache_entry_logs,
        files=files,
        open_index=env.open_index,
    )
    try:
        states = {
            ledger_id: LedgerState.from_bytes(ledger_id, raw)
            for ledger_id, raw in storage.ledger_states().items()
        }
        loaded = LoadedStore(
            storage, states, storage.tombstones.copy(), damaged=set(storage.damaged_ledgers)
        )
        mark = storage.checkpoint_mark()
        journal = journal_files(journal_dir, files)
        _check_mark(mark, [seq for seq, _ in journal], journal_dir)
        storage.remove_orphan_logs()
        limit = max(config.max_entry_bytes, _REPLAY_RECORD_LIMIT) + 1024
        started = time.perf_counter()
        # The compiled replay reads the bookie's own disks only: the simulator's keeps to
        # the pure-Python replay, the reference.
        fast = _fastreplay if files is LOCAL_FILES else None
        if fast is not None:
            _replay_compiled(loaded, fast, journal_dir, mark, limit)
        else:
            for payload, _ in replay(journal_dir, mark, limit, files):
                _decode_and_apply(loaded, payload)
        loaded.replay_s = time.perf_counter() - started
        loaded.compiled = fast is not None
        # A checkpointed state may name entries whose records were lost after its mark
        # (never acknowledged, or VOLATILE and unsynced): recount from what is stored. The
        # checksummed index summary, not a B-tree lookup, says what the index holds, so a
        # damaged index can never lower it (entries above it are absent for sure).
        for ledger_id, state in states.items():
            # A deleted ledger is fenced: one recreated by a fence or a recovery write
            # after its deletion (even if the FENCE record that followed was torn off), or
            # one whose row a failed index update left behind (collected again).
            state.fenced |= ledger_id in loaded.tombstones
            held = storage.index_summary(ledger_id).last
            state.last_entry_id = max(held, loaded.cache.last_id(ledger_id))
        for seq, path in journal:
            if seq < mark.file_seq:
                files.unlink(path)
        loaded.next_journal_seq = max([mark.file_seq, *(seq for seq, _ in journal)]) + 1
    except (ValueError, struct.error, lmdb.Error) as exc:
        # Damaged index records (ledger states, keys, locations): refuse to start with one
        # clear error rather than a raw decoding error.
        storage.close()
        raise StorageIOError(f"cannot load the store in {config.data_dir}: {exc}") from exc
    except BaseException:
        storage.close()
        raise
    _log.info(
        "bookie storage opened",
        ledgers=len(states),
        replayed_records=loaded.replayed_records,
        replayed_bytes=loaded.replayed_bytes,
        compiled_replay=loaded.compiled,
        checkpoint_mark=tuple(mark),
    )
    return loaded


def _check_mark(mark: JournalMark, seqs: list[int], journal_dir: Path) -> None:
    """Refuse an index whose mark points before journal files already deleted."""
    if mark.file_seq == 0:
        return  # no checkpoint yet: replay reads every file there is
    needed = range(mark.file_seq, max([mark.file_seq, *seqs]) + 1)
    missing = sorted(set(needed) - set(seqs))
    if missing:
        raise StorageIOError(
            f"the index's checkpoint mark points to journal file {mark.file_seq} but "
            f"{journal_dir} lacks file(s) {missing[:5]}: the index is older than the journal "
            "(damaged or restored from an old copy); entries checkpointed since would be "
            "forgotten, so the bookie does not start"
        )


def _decode_and_apply(loaded: LoadedStore, payload: bytes) -> None:
    """Replay one journal record (a damaged one is logged and skipped)."""
    try:
        record = decode_record(payload)
    except ValueError as exc:
        _log.error("journal record skipped", error=str(exc))
        return
    loaded.replayed_records += 1
    loaded.replayed_bytes += _FRAME_BYTES + len(payload)
    _apply(loaded, record)


def _replay_compiled(
    loaded: LoadedStore, fast: ModuleType, journal_dir: Path, mark: JournalMark, limit: int
) -> None:
    """Replay the journal from ``mark`` through the compiled module: ADD records straight
    from the chunk read (:func:`_apply_add`), the others as the pure-Python replay does."""
    header_size = ADD_HEADER.size
    for payload, _ in replay_scanned(journal_dir, mark, limit, fast.scan_frames):
        if payload[0] == _ADD and len(payload) >= header_size:
            _, ledger_id, volatile = ADD_HEADER.unpack_from(payload)
            loaded.replayed_records += 1
            loaded.replayed_bytes += _FRAME_BYTES + len(payload)
            _apply_add(loaded, fast, ledger_id, bool(volatile), payload[header_size:])
            continue
        _decode_and_apply(loaded, bytes(payload))  # nothing kept refers to the chunk


def _apply_add(
    loaded: LoadedStore, fast: ModuleType, ledger_id: int, volatile: bool, blob: memoryview
) -> None:
    """:func:`_apply` of an ADD record, its entries applied in C; the ledger's state moves
    once by what they sum up to."""
    if ledger_id in loaded.damaged:
        return
    state = loaded.states.get(ledger_id)
    if state is None:
        _log.warning("journal record for an unknown ledger", ledger=ledger_id)
        return
    loaded.touched.add(ledger_id)
    accepted, last, lac, runs, bad, problem, kept_ids, kept_starts, count, whole = (
        fast.apply_entries(ledger_id, blob, _stored_of(loaded, ledger_id))
    )
    if problem is not None:  # the frame's CRC matched: written so by a bug
        _log.error("journal batch with a malformed tail", ledger=ledger_id, problem=problem)
    for _ in bad:
        _log.error("journal entry with a bad digest skipped", ledger=ledger_id)
    if kept_ids:
        ids, starts = array("q"), array("q")
        ids.frombytes(kept_ids)
        starts.frombytes(kept_starts)
        if len(ids) == count and all(map(operator.lt, ids, ids[1:])):
            loaded.cache.add_packed(ledger_id, blob[:whole], ids, starts)  # the record as it is
        else:
            loaded.cache.add(ledger_id, repacked(blob, starts))
    if accepted:
        state.note_entry(last)
        state.raise_lac(lac)
        sync = state.sync
        if volatile:
            sync.advance_to(lac)
        # replay() synced the file: the entries are durable now.
        for first, run_last in runs:
            sync.mark_run(first, run_last)


def _apply(loaded: LoadedStore, record: Record) -> None:
    ledger_id = record.ledger_id
    if ledger_id in loaded.damaged:
        if record.kind is RecordKind.DELETE:
            loaded.damaged.discard(ledger_id)
            loaded.deleted.add(ledger_id)
            loaded.tombstones.add_all((ledger_id,))
        return
    states = loaded.states
    state = states.get(ledger_id)
    if record.kind is RecordKind.KEY:
        if state is None:
            states[ledger_id] = LedgerState(ledger_id, record.data)
            loaded.touched.add(ledger_id)
        elif not state.master_key:  # rebuilt from the entry logs: the key given since
            state.master_key = record.data
            loaded.touched.add(ledger_id)
        return
    if record.kind is RecordKind.DELETE:
        # Drop what the ledger had before; records after this one (a fence or a recovery
        # write after the deletion) start it afresh, fenced, in the write cache only.
        states.pop(ledger_id, None)
        loaded.cache.drop_ledger(ledger_id)
        loaded.touched.discard(ledger_id)
        loaded.deleted.add(ledger_id)
        loaded.tombstones.add_all((ledger_id,))
        return
    if state is None:
        _log.warning("journal record for an unknown ledger", ledger=ledger_id)
        return
    loaded.touched.add(ledger_id)
    if record.kind is RecordKind.FENCE:
        state.fenced = True
    elif record.kind is RecordKind.LAC:
        state.raise_lac(record.lac)
    else:
        entries, problem = unpack_entries(record.data)
        if problem is not None:  # the frame's CRC matched: written so by a bug
            _log.error("journal batch with a malformed tail", ledger=ledger_id, problem=problem)
        stored = _stored_of(loaded, ledger_id)
        kept = [entry for entry in entries if _apply_entry(state, stored, *entry, record.volatile)]
        if kept:
            loaded.cache.add(ledger_id, pack_unit(kept))


def _apply_entry(
    state: LedgerState,
    stored: Callable[[int, int], set[int]],
    entry_id: int,
    lac: int,
    digest: int,
    data: bytes,
    volatile: bool,
) -> bool:
    """Apply one entry to the ledger's state; True when it is to be cached (its digest
    matches and ``stored`` does not hold it already)."""
    ledger_id = state.ledger_id
    if entry_digest(ledger_id, entry_id, lac, data) != digest:
        _log.error("journal entry with a bad digest skipped", ledger=ledger_id)
        return False
    new = not stored(entry_id, entry_id)  # before the state moves past it: no lookup then
    state.note_entry(entry_id)
    state.raise_lac(lac)
    if volatile:
        state.sync.advance_to(lac)
    # replay() synced the file: the entry is durable now.
    state.sync.mark_synced(entry_id)
    return new


def _stored_of(loaded: LoadedStore, ledger_id: int) -> Callable[[int, int], set[int]]:
    """``stored(low, high)``: the ledger's ids in ``low..high`` in the index (none for a
    ledger deleted during the replay) or the write cache."""

    def stored(low: int, high: int) -> set[int]:
        state = loaded.states.get(ledger_id)
        if state is not None and low > state.last_entry_id:
            return set()  # above every entry stored and every one replayed: the usual case
        held = set(loaded.cache.ids_in(ledger_id, low, high))
        if ledger_id not in loaded.deleted:
            held |= loaded.storage.entries_in(ledger_id, low, high)
        return held

    return stored


__all__ = ["LoadedStore", "load_store"]

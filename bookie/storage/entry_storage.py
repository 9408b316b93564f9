"""Entry storage: write cache, interleaved entry logs, LMDB index, checkpoints and GC.

Layout under ``data_dir``:

- ``entrylogs/NNNNNNNNNN.log`` — entries of many ledgers, appended at checkpoints by the
  entry-log writer (bookie/storage/entry_log_writer.py, which also defines the header and
  the records); a log of a newer format than this bookie reads stops it at open.
- ``index/`` — one LMDB environment (format version 3, bookie/storage/index.py) with four
  tables: ``entries`` (one run row per run of consecutive entries of a ledger written
  back to back: (ledger, first entry) -> (log, offset, record lengths);
  bookie/storage/run_index.py), ``ledgers``
  (ledger -> index summary + :class:`LedgerState` record), ``logs`` (log -> live bytes per
  ledger, for GC) and ``meta`` (format, checkpoint mark, next log id, censuses). Every
  value carries a CRC32C over its key and payload.

A checkpoint appends the frozen write cache to the entry log being filled, fsyncs it, and only
then commits the index rows, ledger rows (with their index summaries) and the new journal
mark in one LMDB transaction (LMDB syncs on commit). So the mark never passes a record
whose entry is not durable in an entry log, an index row never points at bytes that are
not on disk, and a ledger's summary always counts exactly its entry rows.

Reads check the index row's checksum, the stored digest (CRC32C over header and payload,
walog/wire/digest.py) and the record header against the index key: a damaged record is never
served. A lookup miss is reported as absence only when it is proven (bookie/storage/index.py);
otherwise the read answers "damaged" (IO_ERROR), never "no such entry".

Everything here is blocking; the core runs it in dedicated threads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

import lmdb
import structlog

from bookie.storage.entry_log_writer import EntryLogWriter, check_log_versions, entry_log_path
from bookie.storage.environment import open_lmdb_index
from bookie.storage.fastpath import unbuilt
from bookie.storage.files import LOCAL_FILES, Files, probe_write
from bookie.storage.index import (
    ENTRY_KEY,
    LEDGER_KEY,
    LEDGERS_CENSUS_KEY,
    LOG_KEY,
    LOGS_CENSUS_KEY,
    MARK_KEY,
    NEXT_LOG_KEY,
    TOMBSTONES_KEY,
    Census,
    IndexSummary,
    LedgerRow,
    Run,
    pack_census,
    pack_ledger_row,
    pack_mark,
    pack_next_log,
    seal,
    unpack_next_log,
    unseal,
    unseal_run_row,
)
from bookie.storage.index_audit import (
    AbsenceProof,
    IndexContents,
    Tables,
    audit_index,
    initialise,
    migrate,
    open_tables,
)
from bookie.storage.journal_files import JournalMark, StorageIOError
from bookie.storage.log_space import LogSpace, live_of
from bookie.storage.record_reads import Location, RecordReader, StoredRecord
from bookie.storage.run_index import (
    RunChange,
    find_run,
    held_in,
    held_runs,
    ledger_rows_from,
    put_runs,
)
from bookie.storage.tombstones import Tombstones
from bookie.storage.write_cache import Unit, pack_unit
from walog import mutations
from walog.wire.packing import ENTRY_HEADER

_log = structlog.get_logger(__name__)


READ_ENTRY_OVERHEAD = 64
"""What a read answer's byte limit counts per entry besides its payload: at least what its
ids, LAC, digest and framing add to an answer (at most 50 bytes in a gRPC ``Entry``, 24 in a
native frame), so an answer of ``max_bytes`` fits a message of that size whatever the entry
sizes, empty entries included."""


class UnreadableEntryLogError(StorageIOError):
    """A compaction step could not read an entry of the log it compacts (EIO and the like:
    the disk failed the read, the record was never seen). Nothing of the log was moved or
    deleted; a later compaction pass takes it again.

    Attributes:
        log_id: the entry log left in place.
    """

    def __init__(self, message: str, log_id: int) -> None:
        super().__init__(message)
        self.log_id = log_id


def _open_index(
    index_dir: Path,
    open_index: Callable[[Path], lmdb.Environment],
    log_names: Callable[[], list[str]],
    *,
    rebuild: bool,
) -> tuple[lmdb.Environment, Tables, IndexContents]:
    """Open the index, initialise a fresh one, audit it (StorageIOError when it fails)."""
    env: lmdb.Environment | None = None
    try:
        env = open_index(index_dir)
        # A damaged index fails here (MDB_CORRUPTED, MDB_PAGE_NOTFOUND), not only in open.
        tables, fresh = open_tables(env)
        if fresh:
            initialise(env, tables, log_names(), rebuild=rebuild)
        else:
            migrate(env, tables)
        return env, tables, audit_index(env, tables)
    except (lmdb.Error, StorageIOError) as exc:
        if env is not None:
            env.close()
        if isinstance(exc, StorageIOError):
            raise
        raise StorageIOError(f"cannot open index {index_dir}: {exc}") from exc


class EntryStorage:
    """Entry logs plus the LMDB index. Not thread-safe for writers: one writer thread
    calls :meth:`checkpoint` and :meth:`delete_ledgers`; readers may run concurrently.

    Opening audits the index (bookie/storage/index_audit.py): a damaged index either refuses to
    open with a :class:`StorageIOError` or names the ledgers it cannot vouch for in
    :attr:`damaged_ledgers`.

    ``cache_written``: keep the entry-log pages a checkpoint wrote in the page cache; when
    False they are dropped once synced (``StorageConfig.cache_entry_logs``).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        entry_log_file_bytes: int,
        cache_written: bool = True,
        rebuild: bool = False,
        files: Files = LOCAL_FILES,
        open_index: Callable[[Path], lmdb.Environment] | None = None,
    ) -> None:
        self._files = files
        self.log_dir = data_dir / "entrylogs"
        self.index_dir = data_dir / "index"
        for directory in (self.log_dir, self.index_dir):
            if not files.exists(directory):
                files.makedirs(directory)
                files.fsync_dir(directory.parent)
        self._lock_fd = lock_directory(data_dir, files)
        try:
            env, tables, contents = _open_index(
                self.index_dir, open_index or open_lmdb_index, self._log_names, rebuild=rebuild
            )
            check_log_versions(self.log_dir, self._log_names(), files)
        except StorageIOError:
            files.close(self._lock_fd)
            raise
        self._env = env
        self._entries = tables.entries
        self._records = RecordReader(env, tables.entries, files, self.log_dir)
        self._ledgers = tables.ledgers
        self._logs = tables.logs
        self._meta = tables.meta
        # Writer-thread state, updated only after the transaction that stores it commits.
        self._rows: dict[int, LedgerRow] = contents.rows
        self._live = contents.live
        self._ledgers_census = contents.ledgers_census
        self._logs_census = contents.logs_census
        self._mark = JournalMark(*contents.mark)
        #: Ledgers whose state or entries the index cannot vouch for (IO_ERROR for them).
        self.damaged_ledgers: set[int] = contents.damaged
        #: Ledgers deleted here, kept fenced for good (bookie/storage/tombstones.py).
        self.tombstones = contents.tombstones
        self._absence = AbsenceProof(tables)
        self._log_writer = EntryLogWriter(
            self.log_dir,
            files,
            file_bytes=entry_log_file_bytes,
            cache_written=cache_written,
            reserve_log_id=self._reserve_log_id,
        )
        #: The entry logs' live accounting, for compaction.
        self.space = LogSpace(self._live, self._log_writer)
        if missing := unbuilt():
            _log.warning(
                "compiled hot paths not built: they run in pure Python, about three times "
                "the CPU (pip install -e .)",
                modules=missing,
            )
        self.logs_deleted = 0
        self.logs_compacted = 0
        self.compaction_read_errors = 0
        """Compaction steps stopped by an I/O error reading the log they compact."""

    # -- reading state at open ----------------------------------------------------------

    def checkpoint_mark(self) -> JournalMark:
        """The journal position replay starts from (0, 0 before the first checkpoint)."""
        return self._mark

    def ledger_states(self) -> dict[int, bytes]:
        """Every intact stored ledger state record (damaged ones are in
        :attr:`damaged_ledgers`)."""
        return {ledger_id: row.state for ledger_id, row in self._rows.items()}

    def index_summary(self, ledger_id: int) -> IndexSummary:
        """How many entry rows the index holds for the ledger, and the highest id."""
        row = self._rows.get(ledger_id)
        return IndexSummary() if row is None else row.summary

    def remove_orphan_logs(self) -> None:
        """Delete entry logs no index row points into (a checkpoint that crashed before
        its index commit); their entries are still in the journal after the mark.

        Call only once the mark is known to be current (its journal files exist): an
        index rolled back to an older transaction would make live logs look orphaned.
        """
        for name in self._log_names():
            path = self.log_dir / name
            if path.stem.isdigit() and int(path.stem) not in self._live:
                _log.info("removing unreferenced entry log", file=str(path))
                self._files.unlink(path)

    def _log_names(self) -> list[str]:
        """The names of the entry logs in the log directory."""
        return [name for name in self._files.listdir(self.log_dir) if name.endswith(".log")]

    def restore(
        self,
        rows: dict[int, list[tuple[bytes, bytes]]],
        live: dict[int, dict[int, int]],
        states: dict[int, bytes],
        mark: JournalMark,
    ) -> None:
        """Commit index rows for records already in the entry logs (``entry_row`` rows
        by ledger, live bytes by log and ledger, ledger states, the journal mark): the
        rebuild of a lost index (bookie/storage/rebuild.py), on a fresh index only."""
        self._commit(rows, live, states, mark, repoint=False)

    def probe(self) -> None:
        """Write and sync a block in the entry-log directory, then remove it: after a
        failed checkpoint, proof that the disk takes writes again even when there is
        nothing to checkpoint. StorageIOError when it does not."""
        try:
            probe_write(self._files, self.log_dir)
        except OSError as exc:
            message = f"entry-log directory {self.log_dir} failed a write: {exc}"
            raise StorageIOError(message) from exc

    # -- reads --------------------------------------------------------------------------

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        """True when an index row holds the entry: an intact run row, or a row keyed with
        the entry that fails its checks (a damaged row before it does not count: the entry
        is then stored again rather than taken as held)."""
        with self._env.begin(db=self._entries) as txn:
            found = find_run(txn.cursor(), ledger_id, entry_id)
        return found.run is not None or (found.damaged and found.exact)

    def entries_in(self, ledger_id: int, first: int, last: int) -> set[int]:
        """The ids in ``first..last`` that an index row holds (a row that fails its checks
        holds its first entry): what :meth:`contains` says of each, in one read (journal
        replay asks it per record)."""
        with self._env.begin(db=self._entries) as txn:
            # Keys order ids as unsigned: negative ids (never stored, but asked about as
            # any other) sort after the others; only a damaged row could be keyed so.
            found = held_in(txn, self._entries, ledger_id, max(first, 0), last)
            if first < 0:
                cursor = txn.cursor()
                for entry_id in range(first, min(last, -1) + 1):
                    if cursor.set_key(ENTRY_KEY.pack(ledger_id, entry_id)):
                        found.add(entry_id)
        return found

    def held_runs(
        self, ledger_id: int, first: int, last: int
    ) -> tuple[list[tuple[int, int]], list[int]]:
        """``(ranges, damaged)``: the entries in ``first..last`` (not negative) that intact
        index rows hold, as ascending ranges, and the first entries of the ledger's rows in
        that range that fail their checks (bookie/storage/run_index.py). No entry log is
        read."""
        with self._env.begin(db=self._entries) as txn:
            return held_runs(txn, self._entries, ledger_id, first, last)

    def read_run(
        self, ledger_id: int, first: int, last: int, max_bytes: int
    ) -> tuple[list[StoredRecord], bool]:
        """Consecutive stored entries from ``first`` (at most up to ``last``, at least one
        if present, at most ``max_bytes`` of payload and :data:`READ_ENTRY_OVERHEAD` per
        entry after the first): one index lookup and one entry-log read per run row.

        Returns ``(records, damaged)``: ``damaged`` is True when the run stopped at a
        record or index row that failed its checks (logged, never returned), or when
        ``first`` has no index row and its absence cannot be proven.
        """
        pieces: list[Run] = []
        damaged = False
        try:
            with self._env.begin(db=self._entries) as txn:
                cursor = txn.cursor()
                found = find_run(cursor, ledger_id, first)
                run = found.run
                if run is None:
                    if found.damaged:
                        _log.error("damaged index row", ledger=ledger_id, entry=first)
                        return [], True
                    if not self._absence.proven(txn, ledger_id, first):
                        _log.warning(
                            "entry missing from the index but not provably absent",
                            ledger=ledger_id,
                            entry=first,
                        )
                        return [], True
                    return [], False
                entry_id, size = first, 0
                while True:
                    # The lengths say what fits: read no record that will not be served.
                    stop = entry_id
                    for length in run.lengths[entry_id - run.first :]:
                        cost = length - ENTRY_HEADER.size + READ_ENTRY_OVERHEAD
                        if stop > last or (stop > first and size + cost > max_bytes):
                            break
                        size += cost
                        stop += 1
                    if stop > entry_id:
                        pieces.append(run.piece(entry_id, stop - 1))
                    if stop <= run.last or stop > last:
                        break
                    entry_id = stop
                    key = ENTRY_KEY.pack(ledger_id, entry_id)
                    if not cursor.set_key(key):
                        break  # a gap: the run of consecutive entries ends here
                    run = unseal_run_row(key, bytes(cursor.value()))
                    if run is None:
                        _log.error("damaged index row", ledger=ledger_id, entry=entry_id)
                        damaged = True
                        break
        except lmdb.Error as exc:
            _log.error("index read failed", ledger=ledger_id, entry=first, error=str(exc))
            return [], True
        records: list[StoredRecord] = []
        files: dict[int, int] = {}
        try:
            for piece in pieces:
                for record in self._records.read_piece(files, ledger_id, piece):
                    if record is None:
                        return records, True
                    records.append(record)
        finally:
            for fd in files.values():
                self._files.close(fd)
        return records, damaged

    # -- checkpoint -----------------------------------------------------------------------

    def checkpoint(
        self,
        pieces: Iterable[tuple[int, Unit]],
        states: dict[int, bytes],
        mark: JournalMark,
        *,
        replace: Collection[tuple[int, int]] = (),
        tombstones: Tombstones | None = None,
    ) -> int:
        """Append the units of ``pieces`` (grouped by ledger) to entry logs, fsync them,
        then commit index rows, ledger rows (state + index summary), ``tombstones`` (every
        ledger deleted before the mark, a superset of :attr:`tombstones`) and ``mark`` in
        one transaction. Every
        ledger with entries must be in ``states`` or already stored. A row that exists is
        kept (a duplicate), except for the ``(ledger, entry)`` in ``replace``: new copies
        of entries whose stored copy is damaged. Returns the entries written."""
        return self._write(
            pieces, states, mark, repoint=False, replace=replace, tombstones=tombstones
        )

    def _write(
        self,
        pieces: Iterable[tuple[int, Unit]],
        states: dict[int, bytes],
        mark: JournalMark,
        *,
        repoint: bool,
        replace: Collection[tuple[int, int]] = (),
        tombstones: Tombstones | None = None,
    ) -> int:
        rows: dict[int, list[tuple[bytes, bytes]]] = {}
        live: dict[int, dict[int, int]] = {}
        written = self._log_writer.write(pieces, rows, live)
        for ledger_id in rows:
            if not repoint and ledger_id not in states and ledger_id not in self._rows:
                raise ValueError(f"ledger {ledger_id}: entries to checkpoint without a state")
        try:
            self._commit(
                rows, live, states, mark, repoint=repoint, replace=replace, tombstones=tombstones
            )
        except lmdb.Error as exc:
            raise StorageIOError(f"index commit failed: {exc}") from exc
        return written

    def _commit(
        self,
        rows: dict[int, list[tuple[bytes, bytes]]],
        live: dict[int, dict[int, int]],
        states: dict[int, bytes],
        mark: JournalMark,
        *,
        repoint: bool,
        replace: Collection[tuple[int, int]] = (),
        tombstones: Tombstones | None = None,
    ) -> None:
        if tombstones == self.tombstones:
            tombstones = None
        new_rows: dict[int, LedgerRow] = {}
        ledgers_census = self._ledgers_census
        with self._env.begin(write=True) as txn:
            changes: dict[int, RunChange] = {}
            for ledger_id, ledger_rows in rows.items():
                old = self._rows.get(ledger_id)
                held_last = (
                    old.summary.last
                    if old is not None
                    else -1
                    if ledger_id not in self.damaged_ledgers
                    else None
                )
                # An entry already held keeps its stored copy (a duplicate), except a
                # re-replicated copy of a damaged one; a compaction's copies win.
                wins = None if repoint else {e for (led, e) in replace if led == ledger_id}
                changes[ledger_id] = put_runs(
                    txn,
                    self._entries,
                    ledger_id,
                    ledger_rows,
                    held_last=held_last if not wins else None,
                    new_wins=wins,
                )
            live_docs, logs_census = self._put_live(txn, live)
            changed = {
                ledger_id
                for ledger_id, change in changes.items()
                if change.entries or change.runs
                if not repoint or ledger_id in self._rows
            }
            for ledger_id in states.keys() | changed:
                old = self._rows.get(ledger_id)
                summary = IndexSummary() if old is None else old.summary
                change = changes.get(ledger_id)
                if change is not None:
                    summary = summary.plus(change.entries, change.highest, change.runs)
                state = states.get(ledger_id)
                if state is None:
                    assert old is not None  # checked by _write before the transaction
                    state = old.state
                row = LedgerRow(summary, state)
                key = LEDGER_KEY.pack(ledger_id)
                if txn.replace(key, pack_ledger_row(key, row), db=self._ledgers) is None:
                    ledgers_census = ledgers_census.plus(key)
                new_rows[ledger_id] = row
            if ledgers_census != self._ledgers_census:
                self._put_meta(txn, LEDGERS_CENSUS_KEY, pack_census(ledgers_census))
            if logs_census != self._logs_census:
                self._put_meta(txn, LOGS_CENSUS_KEY, pack_census(logs_census))
            if tombstones is not None:
                self._put_meta(txn, TOMBSTONES_KEY, tombstones.to_bytes())
            self._put_meta(txn, MARK_KEY, pack_mark(*mark))
        if tombstones is not None:
            self.tombstones = tombstones
        self._rows.update(new_rows)
        self._live.update(live_docs)
        self._ledgers_census = ledgers_census
        self._logs_census = logs_census
        self._mark = mark

    def _put_meta(self, txn: lmdb.Transaction, key: bytes, payload: bytes) -> None:
        txn.put(key, seal(key, payload), db=self._meta)

    def _put_live(
        self, txn: lmdb.Transaction, live: dict[int, dict[int, int]]
    ) -> tuple[dict[int, dict[str, int]], Census]:
        """Add live bytes per ledger to the logs' accounting rows (not yet in memory)."""
        docs: dict[int, dict[str, int]] = {}
        census = self._logs_census
        for log_id, per_ledger in live.items():
            old = self._live.get(log_id)
            doc = {} if old is None else dict(old)
            for ledger_id, size in per_ledger.items():
                doc[str(ledger_id)] = doc.get(str(ledger_id), 0) + size
            doc["_total"] = doc.get("_total", 0) + sum(per_ledger.values())
            key = LOG_KEY.pack(log_id)
            txn.put(key, seal(key, json.dumps(doc).encode()), db=self._logs)
            if old is None:
                census = census.plus(key)
            docs[log_id] = doc
        return docs, census

    def _reserve_log_id(self) -> int:
        """The id of the next entry log, taken for good (the next-log row moves past it)."""
        with self._env.begin(write=True, db=self._meta) as txn:
            raw = txn.get(NEXT_LOG_KEY)
            payload = None if raw is None else unseal(NEXT_LOG_KEY, bytes(raw))
            log_id = None if payload is None else unpack_next_log(payload)
            if log_id is None:
                raise StorageIOError(f"index in {self.index_dir}: next entry-log id row damaged")
            # Never reuse the name of an existing log (an index rolled back by damage
            # would otherwise truncate a live one).
            while self._files.exists(entry_log_path(self.log_dir, log_id)):
                log_id += 1
            txn.put(NEXT_LOG_KEY, seal(NEXT_LOG_KEY, pack_next_log(log_id + 1)))
        return log_id

    # -- garbage collection ---------------------------------------------------------------

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> None:
        """Drop the ledgers' rows (damaged ones too) and keep their ids as tombstones, in
        one transaction, then delete the entry logs with no live ledger left (logs partly
        dead are left to compaction: :meth:`compact_step`)."""
        doomed = set(ledger_ids)
        if not doomed:
            return
        census = self._ledgers_census
        tombstones = self.tombstones.copy()
        tombstones.add_all(doomed)
        docs: dict[int, dict[str, int]] = {}
        names = {str(ledger_id) for ledger_id in doomed}
        try:
            with self._env.begin(write=True) as txn:
                for ledger_id in doomed:
                    key = LEDGER_KEY.pack(ledger_id)
                    if txn.pop(key, db=self._ledgers) is not None:
                        census = census.minus(key)
                    cursor = txn.cursor(db=self._entries)
                    cursor.set_range(ENTRY_KEY.pack(ledger_id, 0))
                    while True:
                        entry_key = bytes(cursor.key())
                        if entry_key[:8] != key or not cursor.delete():
                            break
                for log_id, doc in self._live.items():
                    if not names.isdisjoint(doc):
                        doc = {name: size for name, size in doc.items() if name not in names}
                        log_key = LOG_KEY.pack(log_id)
                        txn.put(log_key, seal(log_key, json.dumps(doc).encode()), db=self._logs)
                        docs[log_id] = doc
                self._put_meta(txn, LEDGERS_CENSUS_KEY, pack_census(census))
                self._put_meta(txn, TOMBSTONES_KEY, tombstones.to_bytes())
        except lmdb.Error as exc:
            raise StorageIOError(f"index update failed: {exc}") from exc
        self._ledgers_census = census
        self.tombstones = tombstones
        self._live.update(docs)
        for ledger_id in doomed:
            self._rows.pop(ledger_id, None)
            self.damaged_ledgers.discard(ledger_id)
            self._absence.forget(ledger_id)
        try:
            self._reclaim()
        except (OSError, lmdb.Error) as exc:
            raise StorageIOError(f"reclaiming entry logs failed: {exc}") from exc

    def _reclaim(self) -> None:
        for log_id in sorted(self._live):
            # Read the accounting afresh: a compaction earlier in this loop may have moved
            # live entries into the log being filled.
            doc = self._live.get(log_id)
            if doc is None:
                continue
            total = doc.get("_total", 0)
            live = live_of(doc)
            if log_id == self._log_writer.log_id:
                if live == 0:
                    # Nothing live in the log being filled: start a new one at the next
                    # checkpoint and drop this one.
                    self._log_writer.stop_appending()
                    self._drop_log(log_id)
                continue
            if live == 0 or not total:
                self._drop_log(log_id)

    def _drop_log(self, log_id: int) -> None:
        key = LOG_KEY.pack(log_id)
        census = self._logs_census
        with self._env.begin(write=True) as txn:
            if txn.pop(key, db=self._logs) is not None:
                census = census.minus(key)
                self._put_meta(txn, LOGS_CENSUS_KEY, pack_census(census))
        self._logs_census = census
        self._live.pop(log_id, None)
        self._records.forget(log_id)
        self._files.unlink(entry_log_path(self.log_dir, log_id), missing_ok=True)
        self.logs_deleted += 1
        _log.info("entry log deleted", log=log_id)

    def compact_step(
        self, log_id: int, after: tuple[int, int] | None, max_bytes: int
    ) -> tuple[tuple[int, int] | None, int]:
        """Move about ``max_bytes`` of the live entries of entry log ``log_id``, from just
        after position ``after`` (ledger, entry; None: the start), to the log being filled
        and repoint their index rows; once none is left, delete the log (readers that
        raced the deletion look the entry up again).

        Compaction goes in steps so that checkpoints and deletions run between them; each
        step reads the rows afresh, so a ledger deleted meanwhile is never brought back.

        Two failures to read a record are told apart. A record that was read but fails its
        checks (header or digest: real damage) is left behind, and its reads answer
        IO_ERROR as they did. A read the disk failed (EIO and the like) says nothing about
        the record: the step stops, moving nothing, and the log stays for a later pass.

        Returns:
            ``(position to continue after, bytes moved)``; the position is None once the
            log is gone (compacted, or deleted meanwhile).

        Raises:
            UnreadableEntryLogError: the disk failed a read of the log (counted in
                :attr:`compaction_read_errors`).
            StorageIOError: the index or the log being filled failed.
        """
        doc = self._live.get(log_id)
        if doc is None or log_id == self._log_writer.log_id:
            return None, 0
        moved: list[tuple[int, Unit]] = []
        size = 0
        position = after
        files: dict[int, int] = {}  # one descriptor per log read, closed after the walk
        try:
            with self._env.begin(db=self._entries) as txn:
                for ledger_id in sorted(int(name) for name in doc if name != "_total"):
                    if after is not None and ledger_id < after[0]:
                        continue
                    first = after[1] + 1 if after is not None and ledger_id == after[0] else 0
                    for key, value in ledger_rows_from(txn.cursor(), ledger_id, first):
                        run = unseal_run_row(key, value)
                        if run is None or run.log_id != log_id or run.last < first:
                            continue  # a damaged row stays where it is (its reads fail)
                        piece = run.piece(max(first, run.first), run.last)
                        records: list[StoredRecord | None]
                        try:
                            records = self._records.read_piece(
                                files, ledger_id, piece, raise_unreadable=True
                            )
                        except OSError as exc:
                            if not mutations.enabled("compaction_skips_unreadable"):
                                self.compaction_read_errors += 1
                                raise UnreadableEntryLogError(
                                    f"entry log {log_id} not compacted: reading entries "
                                    f"{piece.first}..{piece.last} of ledger {ledger_id} "
                                    f"failed ({exc}); the log is kept for a later pass",
                                    log_id,
                                ) from exc
                            # The first entry is taken for a damaged one; the others
                            # are read one by one.
                            records = [
                                None,
                                *(
                                    self._records.read_one(
                                        files, ledger_id, e, Location(*piece.location(e))
                                    )
                                    for e in range(piece.first + 1, piece.last + 1)
                                ),
                            ]
                        kept: list[StoredRecord] = []
                        for entry_id, record in enumerate(records, piece.first):
                            position = (ledger_id, entry_id)
                            # None: a damaged record (read, but its checks failed) or a
                            # log gone missing; the entry stays behind and its reads fail.
                            if record is not None:
                                kept.append(record)
                                size += len(record.data)
                            if size >= max_bytes:
                                break
                        if kept:
                            moved.append(
                                (
                                    ledger_id,
                                    pack_unit((r.entry_id, r.lac, r.digest, r.data) for r in kept),
                                )
                            )
                        if size >= max_bytes:
                            break
                    if size >= max_bytes:
                        break
            if moved:
                self._write(moved, {}, self._mark, repoint=True)
            if size < max_bytes:  # the walk reached the end of the log's ledgers
                self._drop_log(log_id)
                self.logs_compacted += 1
                return None, size
        except (OSError, lmdb.Error) as exc:
            raise StorageIOError(f"compacting entry log {log_id} failed: {exc}") from exc
        finally:
            for fd in files.values():
                self._files.close(fd)
        return position, size

    def close(self) -> None:
        """Close the current entry log and the index."""
        self._log_writer.close()
        self._env.close()
        if self._lock_fd >= 0:
            self._files.close(self._lock_fd)  # releases the lock
            self._lock_fd = -1


def lock_directory(data_dir: Path, files: Files = LOCAL_FILES) -> int:
    """Take an exclusive lock on ``data_dir/LOCK`` so two bookies (or a bookie and its
    not yet dead predecessor) never write the same files. The kernel drops it when the
    holder exits, however it exits."""
    path = data_dir / "LOCK"
    try:
        return files.lock(path)
    except BlockingIOError as exc:
        raise StorageIOError(
            f"bookie storage in {data_dir} is in use by another process (lock on {path})"
        ) from exc


__all__ = [
    "EntryStorage",
    "Location",
    "StoredRecord",
    "UnreadableEntryLogError",
    "entry_log_path",
    "live_of",
]

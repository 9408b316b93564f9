"""Opening the LMDB index and checking it whole before the bookie trusts it.

At start the bookie reads every row of the small tables (``meta``, ``ledgers``, ``logs``)
and verifies each one (bookie/storage/index.py), then skips through ``entries`` once per ledger
to find ledgers that have entry rows but no ledger row. The outcome is one of:

- a clear :class:`StorageIOError` (the bookie refuses to start): the format version is
  missing or not ours, a ``meta`` row is missing or fails its checksum, a ``logs`` row is
  damaged (GC would delete live entry logs), a census does not match its table (a row
  was lost or moved, so some ledger may be unknown without a trace), the index is empty
  while entry logs exist, or LMDB itself reports damage;
- or :class:`IndexContents`, where ``damaged`` names the ledgers whose ledger row fails
  its checksum or is missing while entry rows exist: the bookie answers IO_ERROR for
  them, never NO_SUCH_LEDGER, and accepts no write to them.

The cost is one pass over the ledger and log rows plus one B-tree seek per ledger. An
index of the previous format (2) is migrated first (:func:`migrate`, logged as ``index
migrated``): one more pass over the ledger rows.

Reads use :class:`AbsenceProof` when an entry has no row: absence is answered only when
the lookup agrees with the leaf order and the ledger's rows match its summary.
"""

from __future__ import annotations

import dataclasses
import json

import lmdb
import structlog

from bookie.storage.index import (
    ENTRY_KEY,
    FORMAT_KEY,
    FORMAT_VERSION,
    LEDGER_KEY,
    LEDGERS_CENSUS_KEY,
    LOG_KEY,
    LOGS_CENSUS_KEY,
    MARK_KEY,
    META_KEYS,
    NEXT_LOG_KEY,
    PREVIOUS_FORMAT_VERSION,
    TOMBSTONES_KEY,
    Census,
    LedgerRow,
    census_of,
    format_payload,
    migrate_ledger_row,
    pack_census,
    pack_mark,
    pack_next_log,
    seal,
    unpack_census,
    unpack_ledger_row,
    unpack_mark,
    unseal,
    unseal_run_row,
)
from bookie.storage.journal_files import StorageIOError
from bookie.storage.tombstones import Tombstones
from walog.format_versions import newer_version_message

_log = structlog.get_logger(__name__)

_TABLES = (b"entries", b"ledgers", b"logs", b"meta")
_LEDGER_PREFIX = 8  # bytes of the ledger id at the start of an entries key


@dataclasses.dataclass(frozen=True)
class Tables:
    """The four LMDB tables of the index."""

    entries: lmdb._Database
    ledgers: lmdb._Database
    logs: lmdb._Database
    meta: lmdb._Database


@dataclasses.dataclass
class IndexContents:
    """What the audit found and verified.

    Attributes:
        rows: Intact ledger rows by ledger id.
        damaged: Ledgers the bookie cannot vouch for (answer IO_ERROR for them).
        live: Live bytes per ledger (``str(ledger_id)`` and ``"_total"``) per entry log.
        mark: The journal position replay starts from.
        ledgers_census: Census of the ``ledgers`` table.
        logs_census: Census of the ``logs`` table.
        tombstones: The ledgers deleted here, fenced for good.
    """

    rows: dict[int, LedgerRow]
    damaged: set[int]
    live: dict[int, dict[str, int]]
    mark: tuple[int, int]
    ledgers_census: Census
    logs_census: Census
    tombstones: Tombstones


def open_tables(env: lmdb.Environment) -> tuple[Tables, bool]:
    """Open the index tables; returns ``(tables, fresh)``, ``fresh`` for a new index.

    An existing index must have all four tables: creating a missing one would make a
    damaged table name look like an empty table.
    """
    with env.begin() as txn:
        names = {bytes(key) for key, _ in txn.cursor()}
    fresh = not names
    missing = [name.decode() for name in _TABLES if name not in names]
    if not fresh and missing:
        raise StorageIOError(
            f"index in {env.path()} lacks table(s) {', '.join(missing)}: it is damaged or "
            "not a bookie index"
        )
    dbs = [env.open_db(name, create=fresh) for name in _TABLES]
    return Tables(*dbs), fresh


def initialise(
    env: lmdb.Environment, tables: Tables, log_names: list[str], *, rebuild: bool = False
) -> None:
    """Write the ``meta`` rows of a new index (one transaction), given the names of the
    entry logs already there; ``rebuild``: for an index about to be rebuilt from those logs
    (bookie/storage/rebuild.py)."""
    if not rebuild and log_names:
        raise StorageIOError(
            f"index in {env.path()} is empty but the data directory holds entry logs "
            f"({', '.join(sorted(log_names)[:3])}): the index was "
            "lost; this bookie cannot tell which entries it holds (decommission it and let "
            "auto-recovery re-replicate its ledgers)"
        )
    rows = {
        FORMAT_KEY: format_payload(),
        MARK_KEY: pack_mark(0, 0),
        NEXT_LOG_KEY: pack_next_log(1),
        LEDGERS_CENSUS_KEY: pack_census(Census()),
        LOGS_CENSUS_KEY: pack_census(Census()),
        TOMBSTONES_KEY: Tombstones().to_bytes(),
    }
    with env.begin(write=True, db=tables.meta) as txn:
        for key, payload in rows.items():
            txn.put(key, seal(key, payload))


def migrate(env: lmdb.Environment, tables: Tables) -> bool:
    """Bring an index of the previous format (2) to this one, in one transaction: its
    entry rows are run rows of one entry already, so only the ledger rows change (their
    summary counts run rows too: as many as entries); a ledger row that fails its
    checksum is left as it is (still damaged). Returns True when it migrated; an index of
    any other format is left to :func:`audit_index` to judge."""
    with env.begin(write=True) as txn:
        raw = txn.get(FORMAT_KEY, db=tables.meta)
        payload = None if raw is None else unseal(FORMAT_KEY, bytes(raw))
        if payload != format_payload(PREVIOUS_FORMAT_VERSION):
            return False
        changed: list[tuple[bytes, bytes]] = []
        damaged = 0
        for raw_key, value in txn.cursor(db=tables.ledgers):
            key = bytes(raw_key)
            row = migrate_ledger_row(key, bytes(value)) if len(key) == LEDGER_KEY.size else None
            if row is None:
                damaged += 1
            else:
                changed.append((key, row))
        for key, row in changed:
            txn.put(key, row, db=tables.ledgers)
        txn.put(FORMAT_KEY, seal(FORMAT_KEY, format_payload()), db=tables.meta)
    _log.info(
        "index migrated",
        index=env.path(),
        from_format=PREVIOUS_FORMAT_VERSION,
        to_format=FORMAT_VERSION,
        ledgers=len(changed),
        damaged_ledger_rows=damaged,
    )
    return True


def audit_index(env: lmdb.Environment, tables: Tables) -> IndexContents:
    """Verify the whole index except the entry rows (see the module docstring)."""
    where = env.path()
    with env.begin() as txn:
        meta = _meta_rows(txn, tables, where)
        rows: dict[int, LedgerRow] = {}
        damaged: set[int] = set()
        keys: list[bytes] = []
        for raw_key, value in txn.cursor(db=tables.ledgers):
            key = bytes(raw_key)
            keys.append(key)
            row = unpack_ledger_row(key, bytes(value)) if len(key) == LEDGER_KEY.size else None
            ledger_id = int.from_bytes(key[:8].rjust(8, b"\0"), "big", signed=True)
            if row is None:
                _log.warning("damaged ledger row: answering IO_ERROR for it", ledger=ledger_id)
                damaged.add(ledger_id)
            else:
                rows[ledger_id] = row
        ledgers_census = _check_census(keys, meta[LEDGERS_CENSUS_KEY], "ledger", where)
        live: dict[int, dict[str, int]] = {}
        keys = []
        for raw_key, value in txn.cursor(db=tables.logs):
            key = bytes(raw_key)
            keys.append(key)
            payload = unseal(key, bytes(value)) if len(key) == LOG_KEY.size else None
            if payload is None:
                raise StorageIOError(
                    f"index in {where}: entry-log accounting row {key.hex()} is damaged"
                )
            live[LOG_KEY.unpack(key)[0]] = _live_doc(payload, key, where)
        logs_census = _check_census(keys, meta[LOGS_CENSUS_KEY], "entry-log", where)
        for ledger_id in _ledgers_with_entries(txn, tables):
            if ledger_id not in rows and ledger_id not in damaged:
                _log.warning(
                    "entry rows without a ledger row: answering IO_ERROR for the ledger",
                    ledger=ledger_id,
                )
                damaged.add(ledger_id)
    mark = unpack_mark(meta[MARK_KEY])
    if mark is None:
        raise StorageIOError(f"index in {where}: the checkpoint mark row is malformed")
    return IndexContents(
        rows, damaged, live, mark, ledgers_census, logs_census, _tombstones(meta, where)
    )


def _tombstones(meta: dict[bytes, bytes], where: str) -> Tombstones:
    payload = meta.get(TOMBSTONES_KEY)
    if payload is None:
        return Tombstones()  # an index written before bookies kept them
    tombstones = Tombstones.from_bytes(payload)
    if tombstones is None:
        raise StorageIOError(
            f"index in {where}: meta row {TOMBSTONES_KEY.decode()} is malformed: the bookie "
            "cannot tell which deleted ledgers it must keep fenced"
        )
    return tombstones


def _meta_rows(txn: lmdb.Transaction, tables: Tables, where: str) -> dict[bytes, bytes]:
    found: dict[bytes, bytes] = {}
    raw = txn.get(FORMAT_KEY, db=tables.meta)
    if raw is None:
        raise StorageIOError(
            f"index in {where} has no format version (written by an earlier bookie version, "
            f"or damaged); this bookie reads index format {FORMAT_VERSION} only: move the data "
            "directory away and start the bookie on an empty one (--allow-format)"
        )
    for key in META_KEYS:
        raw = txn.get(key, db=tables.meta)
        payload = None if raw is None else unseal(key, bytes(raw))
        if payload is None:
            state = "missing" if raw is None else "damaged"
            raise StorageIOError(f"index in {where}: meta row {key.decode()} is {state}")
        found[key] = payload
    raw = txn.get(TOMBSTONES_KEY, db=tables.meta)
    if raw is not None:
        payload = unseal(TOMBSTONES_KEY, bytes(raw))
        if payload is None:
            raise StorageIOError(f"index in {where}: meta row {TOMBSTONES_KEY.decode()} is damaged")
        found[TOMBSTONES_KEY] = payload
    if found[FORMAT_KEY] != format_payload():
        text = found[FORMAT_KEY].decode(errors="replace")
        name, _, number = text.rpartition("/")
        if name == "walog-bookie-index" and number.isdigit() and int(number) > FORMAT_VERSION:
            what, version = f"index in {where}", int(number)
            raise StorageIOError(newer_version_message(what, version, FORMAT_VERSION, "the bookie"))
        expected = format_payload().decode()
        raise StorageIOError(
            f"index in {where} has format {text!r}; this bookie reads {expected!r} only"
        )
    return found


def _check_census(keys: list[bytes], payload: bytes, what: str, where: str) -> Census:
    expected = unpack_census(payload)
    found = census_of(keys)
    if expected is None or found != expected:
        count = "?" if expected is None else expected.rows
        raise StorageIOError(
            f"index in {where}: {what} rows do not match their census ({found.rows} rows, "
            f"{count} expected, or a key changed): a row was lost or moved, so the bookie "
            "cannot tell which ledgers it holds"
        )
    return found


def _live_doc(payload: bytes, key: bytes, where: str) -> dict[str, int]:
    try:
        doc = json.loads(payload)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        return {str(name): int(size) for name, size in doc.items()}
    except (ValueError, TypeError) as exc:
        raise StorageIOError(
            f"index in {where}: entry-log accounting row {key.hex()} is unreadable: {exc}"
        ) from exc


def _ledgers_with_entries(txn: lmdb.Transaction, tables: Tables) -> list[int]:
    """Ledger ids of the entries table, one seek per ledger."""
    found: list[int] = []
    cursor = txn.cursor(db=tables.entries)
    present = cursor.first()
    following = 0
    while present:
        key = bytes(cursor.key())
        prefix = key[:_LEDGER_PREFIX].ljust(_LEDGER_PREFIX, b"\0")
        if int.from_bytes(prefix, "big") < following:
            # A damaged branch key sent the seek backwards: stop rather than loop. A
            # ledger missed here has no acknowledged entries of its own (its rows would
            # belong to a ledger that has a ledger row, whose reads check themselves).
            _log.warning("index seek went backwards: ledger scan stopped", key=key.hex())
            break
        found.append(int.from_bytes(prefix, "big", signed=True))
        following = int.from_bytes(prefix, "big") + 1  # next ledger id in byte order
        if following >> (8 * _LEDGER_PREFIX):
            break
        present = cursor.set_range(following.to_bytes(_LEDGER_PREFIX, "big"))
    return found


class AbsenceProof:
    """Decides, on a read's snapshot, whether an entry with no index row is truly absent.

    Verdicts of the per-ledger walk are kept: checkpoints only add rows together with
    their count, so a positive verdict stays valid, and damage does not heal. Call
    :meth:`forget` when a ledger is deleted. Safe to use from several reader threads
    (set operations are atomic; a verdict computed twice is the same).
    """

    def __init__(self, tables: Tables) -> None:
        """Prove absence in ``tables``."""
        self._tables = tables
        self._proven: set[int] = set()
        self._doubtful: set[int] = set()

    def forget(self, ledger_id: int) -> None:
        """Drop the verdict on a deleted ledger."""
        self._proven.discard(ledger_id)
        self._doubtful.discard(ledger_id)

    def proven(self, txn: lmdb.Transaction, ledger_id: int, entry_id: int) -> bool:
        """True when the entry's missing row is provably absent from the index.

        Two checks, both in the read's snapshot. The lookup must agree with the leaf
        order: the rows just before and after the position the B-tree search found
        must sort before and after the key (a damaged branch key sends the search to
        the wrong leaf, where this fails). And the ledger's rows, walked in leaf order,
        must all be intact, strictly ascending and exactly as many as its summary says
        (a lost, moved or duplicated row fails this). A failed check is logged and the
        read answers IO_ERROR.
        """
        key = ENTRY_KEY.pack(ledger_id, entry_id)
        cursor = txn.cursor(db=self._tables.entries)
        if cursor.set_range(key):
            after = bytes(cursor.key())
            before = bytes(cursor.key()) if cursor.prev() else None
        else:
            after = None
            before = bytes(cursor.key()) if cursor.last() else None
        if (after is not None and after <= key) or (before is not None and before >= key):
            _log.error(
                "index lookup disagrees with the index order: answering IO_ERROR",
                ledger=ledger_id,
                entry=entry_id,
            )
            return False
        return self._rows_match_summary(txn, ledger_id)

    def _rows_match_summary(self, txn: lmdb.Transaction, ledger_id: int) -> bool:
        """The ledger's run rows in leaf order: all intact, ascending without overlap,
        holding as many entries in as many rows as its summary says.

        Checkpoints and compactions change rows together with the summary, so a positive
        verdict stays valid and is kept (deleting the ledger forgets it); so is a negative
        one.
        """
        if ledger_id in self._proven:
            return True
        if ledger_id in self._doubtful:
            return False
        prefix = LEDGER_KEY.pack(ledger_id)
        raw = txn.get(prefix, db=self._tables.ledgers)
        row = None if raw is None else unpack_ledger_row(prefix, bytes(raw))
        # No ledger row: the ledger is younger than the last checkpoint, so no entry rows.
        expected = (0, 0) if raw is None else None if row is None else row.summary[::2]
        entries = runs = 0
        intact = expected is not None
        previous = b""
        following = 0  # the lowest id the next run may start at
        cursor = txn.cursor(db=self._tables.entries)
        present = intact and cursor.set_range(ENTRY_KEY.pack(ledger_id, 0))
        while present:
            entry_key = bytes(cursor.key())
            if entry_key[:8] != prefix:
                break
            run = unseal_run_row(entry_key, bytes(cursor.value()))
            if entry_key <= previous or run is None or run.first < following:
                intact = False
                break
            previous, following = entry_key, run.last + 1
            entries += len(run.lengths)
            runs += 1
            present = cursor.next()
        if intact and (entries, runs) == expected:
            self._proven.add(ledger_id)
            return True
        _log.error(
            "index rows of a ledger do not match its summary: answering IO_ERROR for its "
            "missing entries",
            ledger=ledger_id,
            entries=entries,
            runs=runs,
            expected=expected,
        )
        self._doubtful.add(ledger_id)
        return False


__all__ = [
    "AbsenceProof",
    "IndexContents",
    "Tables",
    "audit_index",
    "initialise",
    "migrate",
    "open_tables",
]

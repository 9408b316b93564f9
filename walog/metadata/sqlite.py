"""Embedded metadata store: one SQLite file shared by the processes of one host.

Layout of the file:

- ``nodes``: one row per record. ``version`` is the CAS version; ``czxid`` / ``mzxid`` /
  ``pzxid`` are change numbers of the record's creation, last data change and last change
  of its children (ZooKeeper's names), used by the watch poller. ``owner`` is NULL for
  persistent records and the owning session for liveness-bound ones.
- ``sessions``: ``(id, expires_at)`` per store that holds liveness-bound records; a heartbeat
  thread pushes ``expires_at`` forward. A record whose session expired is invisible to every
  reader at once and is purged by the next write transaction of any process.
- ``counters``: named 64-bit counters for :meth:`next_id`.
- ``changes``: one global change number, bumped by every write transaction in that same
  transaction; watch pollers compare it before looking at individual records.
- ``PRAGMA user_version``: the file's format version
  (:mod:`walog.metadata.sqlite_schema`, which creates the tables); a file of a newer
  version is refused with :class:`walog.errors.NewerFormatError` before anything is
  written to it.

Writes use ``BEGIN IMMEDIATE`` (one writer at a time, waiting up to the busy timeout, which
is the store's call timeout);
WAL mode lets readers run beside the writer. Processes that open a new file at the same
moment all switch it to WAL mode; each waits for the others' switch the same way.
``synchronous=FULL``: a committed CAS survives a power loss, which ledger closes rely on.
Every sqlite3 call runs on a thread of this module (one connection per thread), never on
the event loop.

Whoever can write the file can rewrite any ledger's metadata, so a new file is created
with mode 0600 whatever the process's umask (SQLite gives its ``-wal`` and ``-shm`` files
the database file's mode), and a file that its group or other users can write is refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from walog.errors import MetadataConflictError, MetadataError
from walog.metadata.sqlite_schema import check_format, create_tables
from walog.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NodeNotFoundError,
    WatchCallback,
    call_timed_out,
)
from walog.metadata.uri import SqliteURI, check_counter, check_path, parent_of

log = logging.getLogger(__name__)
T = TypeVar("T")

# A record is visible while it is persistent or its owning session has not expired.
_VISIBLE = (
    "(owner IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = owner AND s.expires_at > ?))"
)


def _secure_file(path: str, create: bool = True) -> None:
    """Create the database file 0600 if missing (unless ``create`` is False); refuse one
    that others may write.

    Raises:
        MetadataError: (not retriable) the file is writable by its group or by others, or
            it is missing and ``create`` is False.
    """
    if not create and not os.path.exists(path):
        err = MetadataError(
            f"sqlite metadata store {path} does not exist (check the path of the metadata "
            "URI; this command creates none)"
        )
        err.retriable = False
        raise err
    try:
        with suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as exc:
        err = MetadataError(f"cannot open sqlite metadata store {path}: {exc.strerror}")
        err.retriable = False
        raise err from exc
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        err = MetadataError(
            f"sqlite metadata store {path} is writable by "
            f"{'its group' if mode & stat.S_IWGRP else 'other users'} (mode {mode:04o}): "
            f"anyone who can write it can rewrite ledger metadata; run `chmod 600 {path}`"
        )
        err.retriable = False
        raise err


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's SQLITE_BUSY: another connection holds the lock wanted."""
    return isinstance(exc, sqlite3.OperationalError) and (
        exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
    )


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    try:
        # Switching a new file to WAL reads its header and then upgrades that read lock to
        # a write lock. When another connection took the write lock in between (processes
        # that open a fresh file together all switch it), SQLite answers SQLITE_BUSY at once
        # instead of calling the busy handler, since two connections that each hold a read
        # lock and wait for the other's would wait forever. The statement releases its read
        # lock when it fails, so retrying lets the other switch finish; once one has, the
        # file stays in WAL mode and the pragma only reads. The retries end with the busy
        # timeout, as any other wait for a lock does.
        for attempt in Retrying(
            retry=retry_if_exception(is_busy),
            stop=stop_after_delay(busy_timeout),
            wait=wait_random_exponential(multiplier=0.001, max=0.05),
            reraise=True,
        ):
            with attempt:
                check_format(conn, path)  # before the switch: a newer file stays untouched
                conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
    except BaseException:
        conn.close()
        raise
    return conn


def _subtree_pattern(path: str) -> str:
    escaped = path.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "/%"


@contextmanager
def _write_txn(conn: sqlite3.Connection) -> Iterator[int]:
    """One write transaction; yields its change number after purging expired sessions."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        (seq,) = conn.execute(
            "UPDATE changes SET seq = seq + 1 WHERE id = 0 RETURNING seq"
        ).fetchone()
        _purge_expired(conn, seq, time.time())
        yield int(seq)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _purge_expired(conn: sqlite3.Connection, seq: int, now: float) -> None:
    expired = [r[0] for r in conn.execute("SELECT id FROM sessions WHERE expires_at <= ?", (now,))]
    for session in expired:
        paths = [r[0] for r in conn.execute("SELECT path FROM nodes WHERE owner = ?", (session,))]
        for path in paths:
            _delete_tree(conn, path, seq)
        conn.execute("DELETE FROM sessions WHERE id = ?", (session,))


def _delete_tree(conn: sqlite3.Connection, path: str, seq: int) -> None:
    conn.execute(
        "DELETE FROM nodes WHERE path = ? OR path LIKE ? ESCAPE '\\'",
        (path, _subtree_pattern(path)),
    )
    conn.execute("UPDATE nodes SET pzxid = ? WHERE path = ?", (seq, parent_of(path)))


def _visible_version(conn: sqlite3.Connection, path: str) -> int | None:
    row = conn.execute(
        f"SELECT version FROM nodes WHERE path = ? AND {_VISIBLE}", (path, time.time())
    ).fetchone()
    return None if row is None else int(row[0])


def _insert(
    conn: sqlite3.Connection, path: str, data: bytes, seq: int, owner: str | None, parents: bool
) -> None:
    """Insert a record (its parents too when ``parents``) inside a write transaction."""
    if path == "/" or _visible_version(conn, path) is not None:
        raise NodeExistsError(f"metadata record {path} already exists")
    parent = parent_of(path)
    if _visible_version(conn, parent) is None:
        if not parents:
            raise NodeNotFoundError(f"parent {parent} of metadata record {path} does not exist")
        _insert(conn, parent, b"", seq, None, True)
    conn.execute(
        "INSERT INTO nodes VALUES (?, ?, ?, 0, ?, ?, ?, ?)",
        (path, parent, bytes(data), seq, seq, seq, owner),
    )
    conn.execute("UPDATE nodes SET pzxid = ? WHERE path = ?", (seq, parent))


def _join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join()


class _Watch:
    __slots__ = ("active", "armed", "callback", "path", "signature")

    def __init__(self, path: str, callback: WatchCallback) -> None:
        self.path = path
        self.callback = callback
        self.active = True
        self.armed = False
        self.signature: tuple[int, int, int] | None = None


class SqliteStore(MetadataStore):
    """:class:`MetadataStore` over one SQLite file; several processes may open it.

    Open it with :meth:`open` (or :func:`walog.metadata.open_store`). Liveness-bound
    records belong to a session refreshed every ``heartbeat`` seconds and expire
    ``session_timeout`` seconds after the last refresh. Watches are served by one poller
    thread per store that checks the global change number every ``poll`` seconds; callbacks
    run on that thread, once when the watch is established and then after every change.
    """

    def __init__(
        self, config: SqliteURI, *, timeout: float = 10.0, call_timeout: float | None = None
    ) -> None:
        self._config = config
        self._call_timeout = timeout if call_timeout is None else call_timeout
        self._session = uuid.uuid4().hex
        self._local = threading.local()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="walog-sqlite"
        )
        self._stop = threading.Event()
        # Held across write transactions (which may wait for the busy timeout), so only
        # this store's own threads take it, never the event loop.
        self._lock = threading.Lock()  # guards _registered
        self._watch_lock = threading.Lock()  # guards _watches and _poller; never held long
        self._registered: dict[str, bytes] = {}
        self._watches: list[_Watch] = []
        self._closed = False
        self._heartbeat = threading.Thread(
            target=self._thread_main,
            args=(self._heartbeat_once, config.heartbeat),
            daemon=True,
            name="walog-sqlite-heartbeat",
        )
        self._poller: threading.Thread | None = None

    @classmethod
    async def open(
        cls,
        config: SqliteURI,
        *,
        timeout: float = 10.0,  # noqa: ASYNC109 - the opening's limit, not a deadline
        call_timeout: float | None = None,
        create: bool = True,
    ) -> SqliteStore:
        """Open the database file (creating it if missing, unless ``create`` is False),
        waiting up to ``timeout`` seconds, and start the heartbeat thread; each later call
        ends within ``call_timeout`` seconds (None: ``timeout``).

        Raises:
            walog.errors.NewerFormatError: the file's format version is newer than this
                walog reads (nothing was written to it).
            walog.errors.MetadataError: the file cannot be opened.
        """
        store = cls(config, timeout=timeout, call_timeout=call_timeout)
        try:
            await asyncio.to_thread(_secure_file, config.path, create)
            await store._run(
                lambda conn: create_tables(conn, config.path),
                what="open",
                path="/",
                change=True,
                limit=timeout,
            )
        except BaseException:
            store._executor.shutdown(wait=False)
            raise
        store._heartbeat.start()
        return store

    # -- the one boundary where sqlite3 errors are translated ----------------------------

    def _closed_error(self) -> MetadataError:
        err = MetadataError(f"sqlite metadata store {self._config.path} is closed")
        err.retriable = False  # only a new store can serve this call
        return err

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self._config.path, self._call_timeout)
            self._local.conn = conn
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._conn())
        except sqlite3.Error as exc:
            raise MetadataError(f"sqlite metadata store {self._config.path}: {exc}") from exc

    async def _run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        what: str,
        path: str,
        change: bool,
        limit: float | None = None,
    ) -> T:
        """Run ``fn`` on the store's thread within the call timeout (or ``limit``);
        ``what``, ``path`` and ``change`` name the call for the error raised when time runs
        out (a call queued behind a slow one, or waiting for another process's lock)."""
        if self._closed:
            raise self._closed_error()
        seconds = self._call_timeout if limit is None else limit
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(seconds):
                return await loop.run_in_executor(self._executor, self._call, fn)
        except TimeoutError as exc:
            where = f"sqlite metadata store {self._config.path}"
            raise call_timed_out(where, what, path, seconds, change=change) from exc

    # -- records -------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, int]:
        """Return ``(data, version)``; :class:`NodeNotFoundError` if absent."""
        check_path(path)

        def op(conn: sqlite3.Connection) -> tuple[bytes, int]:
            row = conn.execute(
                f"SELECT data, version FROM nodes WHERE path = ? AND {_VISIBLE}",
                (path, time.time()),
            ).fetchone()
            if row is None:
                raise NodeNotFoundError(f"metadata record {path} does not exist")
            return bytes(row[0]), int(row[1])

        return await self._run(op, what="get", path=path, change=False)

    async def exists(self, path: str) -> int | None:
        """Return the record's version, or None when it does not exist."""
        check_path(path)
        return await self._run(
            lambda conn: _visible_version(conn, path), what="exists", path=path, change=False
        )

    async def create(self, path: str, data: bytes, *, make_parents: bool = True) -> int:
        """Create a record (version 0); :class:`NodeExistsError` if it exists."""
        check_path(path)
        payload = bytes(data)

        def op(conn: sqlite3.Connection) -> int:
            with _write_txn(conn) as seq:
                _insert(conn, path, payload, seq, None, make_parents)
            return 0

        return await self._run(op, what="create", path=path, change=True)

    async def set(self, path: str, data: bytes, version: int) -> int:
        """Compare-and-swap the data (``version == -1`` matches any); return the new version."""
        check_path(path)
        payload = bytes(data)

        def op(conn: sqlite3.Connection) -> int:
            with _write_txn(conn) as seq:
                current = _visible_version(conn, path)
                if current is None:
                    raise NodeNotFoundError(f"metadata record {path} does not exist")
                if version not in (-1, current):
                    raise MetadataConflictError(
                        f"metadata record {path} is at version {current}, not {version}"
                    )
                conn.execute(
                    "UPDATE nodes SET data = ?, version = ?, mzxid = ? WHERE path = ?",
                    (payload, current + 1, seq, path),
                )
            return current + 1

        return await self._run(op, what="set", path=path, change=True)

    async def delete(self, path: str, version: int = -1) -> None:
        """Delete a record and everything below it (any version when ``version == -1``)."""
        check_path(path)
        if path == "/":
            raise ValueError("the root metadata record cannot be deleted")

        def op(conn: sqlite3.Connection) -> None:
            with _write_txn(conn) as seq:
                current = _visible_version(conn, path)
                if current is None:
                    raise NodeNotFoundError(f"metadata record {path} does not exist")
                if version not in (-1, current):
                    raise MetadataConflictError(
                        f"metadata record {path} is at version {current}, not {version}"
                    )
                _delete_tree(conn, path, seq)

        await self._run(op, what="delete", path=path, change=True)

    async def children(self, path: str) -> list[str]:
        """Sorted names of the direct children of ``path``; [] when none or absent."""
        check_path(path)
        cut = 1 if path == "/" else len(path) + 1

        def op(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                f"SELECT path FROM nodes WHERE parent = ? AND path != '/' AND {_VISIBLE}",
                (path, time.time()),
            )
            return sorted(r[0][cut:] for r in rows)

        return await self._run(op, what="children", path=path, change=False)

    async def next_id(self, counter: str) -> int:
        """A new id from the named 64-bit counter; the first id is 1."""
        check_counter(counter)

        def op(conn: sqlite3.Connection) -> int:
            with _write_txn(conn):
                (value,) = conn.execute(
                    "INSERT INTO counters VALUES (?, 1) ON CONFLICT(name) "
                    "DO UPDATE SET value = value + 1 RETURNING value",
                    (counter,),
                ).fetchone()
            return int(value)

        return await self._run(op, what="next_id", path=f"/_counters/{counter}", change=True)

    # -- liveness ------------------------------------------------------------------------

    def _touch_session(self, conn: sqlite3.Connection) -> bool:
        """Push this session's expiry forward; False when it had expired and was purged."""
        expires = time.time() + self._config.session_timeout
        cur = conn.execute(
            "UPDATE sessions SET expires_at = ? WHERE id = ?", (expires, self._session)
        )
        if cur.rowcount:
            return True
        conn.execute("INSERT INTO sessions VALUES (?, ?)", (self._session, expires))
        return False

    async def register(self, path: str, data: bytes) -> None:
        """Create a liveness-bound record; :class:`NodeExistsError` if the path is taken."""
        check_path(path)
        payload = bytes(data)

        def op(conn: sqlite3.Connection) -> None:
            with self._lock:
                with _write_txn(conn) as seq:
                    self._refresh_session(conn, seq)
                    _insert(conn, path, payload, seq, self._session, True)
                self._registered[path] = payload

        await self._run(op, what="register", path=path, change=True)

    async def unregister(self, path: str) -> None:
        """Remove a record made by :meth:`register` (no error if already gone)."""
        check_path(path)

        def op(conn: sqlite3.Connection) -> None:
            with self._lock:
                self._registered.pop(path, None)
                with _write_txn(conn) as seq:
                    row = conn.execute(
                        "SELECT 1 FROM nodes WHERE path = ? AND owner = ?", (path, self._session)
                    ).fetchone()
                    if row is not None:
                        _delete_tree(conn, path, seq)

        await self._run(op, what="unregister", path=path, change=True)

    def _heartbeat_once(self, conn: sqlite3.Connection) -> None:
        """Refresh this session (re-creating purged records) and purge expired sessions."""
        with self._lock:
            if not self._registered:
                now = time.time()
                if conn.execute("SELECT 1 FROM sessions WHERE expires_at <= ?", (now,)).fetchone():
                    with _write_txn(conn):
                        pass  # the transaction purges expired sessions
                return
            with _write_txn(conn) as seq:
                self._refresh_session(conn, seq)

    def _refresh_session(self, conn: sqlite3.Connection, seq: int) -> None:
        """Inside a write transaction, holding ``_lock``: keep this session alive, and
        re-create its records if it had expired and another process purged them."""
        if self._touch_session(conn) or not self._registered:
            return
        # This process was paused past its expiry (or its heartbeat starved).
        for path, data in self._registered.items():
            try:
                _insert(conn, path, data, seq, self._session, True)
            except NodeExistsError:
                log.warning("liveness record %s was taken by another session", path)
        log.warning("sqlite metadata session expired; re-registered %s", list(self._registered))

    def _thread_main(self, step: Callable[[sqlite3.Connection], None], interval: float) -> None:
        # Periodic worker with its own connection; errors are logged and the next tick retries.
        while not self._stop.wait(interval):
            try:
                self._call(step)
            except Exception:
                log.exception("sqlite metadata store background step failed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()

    # -- watches -------------------------------------------------------------------------

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        """Call ``callback`` (on the poller thread) once now and after every change."""
        check_path(path)
        entry = _Watch(path, callback)
        with self._watch_lock:
            if self._closed:
                raise self._closed_error()
            self._watches.append(entry)
            if self._poller is None:
                self._poller = threading.Thread(
                    target=self._thread_main,
                    args=(self._poll_once, self._config.poll),
                    daemon=True,
                    name="walog-sqlite-watch",
                )
                self._poller.start()

        def unsubscribe() -> None:
            entry.active = False
            with self._watch_lock:
                if entry in self._watches:
                    self._watches.remove(entry)

        return unsubscribe

    def _poll_once(self, conn: sqlite3.Connection) -> None:
        (seq,) = conn.execute("SELECT seq FROM changes WHERE id = 0").fetchone()
        with self._watch_lock:
            watches = list(self._watches)
        changed_db = seq != getattr(self._local, "seen_seq", None)
        self._local.seen_seq = seq
        signatures: dict[str, tuple[int, int, int] | None] = {}
        now = time.time()
        for entry in watches:
            if entry.armed and not changed_db:
                continue
            if entry.path not in signatures:
                row = conn.execute(
                    f"SELECT czxid, mzxid, pzxid FROM nodes WHERE path = ? AND {_VISIBLE}",
                    (entry.path, now),
                ).fetchone()
                signatures[entry.path] = None if row is None else (row[0], row[1], row[2])
            signature = signatures[entry.path]
            if entry.armed and signature == entry.signature:
                continue
            entry.armed, entry.signature = True, signature
            if entry.active:
                try:
                    entry.callback()
                except Exception:
                    log.exception("metadata watch callback for %s failed", entry.path)

    async def close(self) -> None:
        """Stop the threads and delete this session's liveness-bound records."""
        if self._closed:
            return

        def op(conn: sqlite3.Connection) -> None:
            with self._watch_lock:
                self._watches.clear()
            with self._lock:
                self._registered.clear()
                with _write_txn(conn) as seq:
                    paths = conn.execute("SELECT path FROM nodes WHERE owner = ?", (self._session,))
                    for (p,) in list(paths):
                        _delete_tree(conn, p, seq)
                    conn.execute("DELETE FROM sessions WHERE id = ?", (self._session,))
            conn.close()
            self._local.conn = None

        try:
            await self._run(op, what="close", path="/", change=True)
        finally:
            self._closed = True
            self._stop.set()
            threads = [t for t in (self._heartbeat, self._poller) if t is not None and t.is_alive()]
            await asyncio.to_thread(_join_all, threads)
            self._executor.shutdown(wait=False)


__all__ = ["SqliteStore", "is_busy"]

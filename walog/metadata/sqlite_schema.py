"""The SQLite metadata store's file: its tables and its format version.

The version is the file's ``PRAGMA user_version`` (a number in the database header):
:data:`SQLITE_STORE_FORMAT`, set in the one transaction that creates the tables of a new
file. A file whose ``user_version`` is 0 was written before the version existed (0.1.0
wrote no version): it is version 1, and it is left as it is. A file of a newer version is
refused before anything is written to it (docs/compatibility.md): :func:`check_format`
reads the header before the store switches the file to WAL mode, and :func:`create_tables`
checks again inside the transaction that creates the tables, so a process that finds a
fresh file never stamps or fills one that a newer walog created meanwhile.

The tables are described in :mod:`walog.metadata.sqlite`.
"""

from __future__ import annotations

import sqlite3

from walog.errors import MetadataError, NewerFormatError
from walog.format_versions import check_version

SQLITE_STORE_FORMAT = 1
"""The format version of the SQLite metadata store's file (its ``user_version``)."""

_TABLES = (
    """CREATE TABLE IF NOT EXISTS nodes (
        path TEXT PRIMARY KEY, parent TEXT NOT NULL, data BLOB NOT NULL,
        version INTEGER NOT NULL, czxid INTEGER NOT NULL, mzxid INTEGER NOT NULL,
        pzxid INTEGER NOT NULL, owner TEXT
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes(parent)",
    "CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes(owner) WHERE owner IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, expires_at REAL NOT NULL)
        WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)
        WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS changes (id INTEGER PRIMARY KEY CHECK (id = 0),
        seq INTEGER NOT NULL)""",
    "INSERT OR IGNORE INTO changes VALUES (0, 0)",
    "INSERT OR IGNORE INTO nodes VALUES ('/', '', x'', 0, 0, 0, 0, NULL)",
)


def _damaged(message: str) -> MetadataError:
    err = MetadataError(message)
    err.retriable = False  # the file says the same on every try
    return err


def check_format(conn: sqlite3.Connection, path: str) -> int:
    """The format version of the store file ``path`` open on ``conn`` (reads only).

    Raises:
        NewerFormatError: the file's version is newer than :data:`SQLITE_STORE_FORMAT`
            (the message names both).
        MetadataError: (not retriable) a version no walog writes (negative).
    """
    (found,) = conn.execute("PRAGMA user_version").fetchone()
    return check_version(
        f"sqlite metadata store {path}",
        int(found) or 1,  # 0: a file of 0.1.0, which wrote no version
        SQLITE_STORE_FORMAT,
        _damaged,
        newer=NewerFormatError,
    )


def create_tables(conn: sqlite3.Connection, path: str) -> None:
    """Create the tables missing from store file ``path`` in one write transaction; a new
    file gets :data:`SQLITE_STORE_FORMAT` in the same transaction.

    Raises:
        NewerFormatError: another process created the file with a newer version (nothing
            is written).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        check_format(conn, path)
        fresh = (
            conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'nodes'"
            ).fetchone()
            is None
        )
        for statement in _TABLES:
            conn.execute(statement)
        if fresh:
            conn.execute(f"PRAGMA user_version = {SQLITE_STORE_FORMAT}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


__all__ = ["SQLITE_STORE_FORMAT", "check_format", "create_tables"]

"""An in-memory stand-in for the part of LMDB's Python API the bookie's index uses.

LMDB as the bookie opens it (``sync=True``) gives atomic, durable commits and snapshot
reads: a write transaction's changes are all there after its commit returns and none of them
if the process dies before, and a read transaction sees the state of its start. That is what
:class:`SimEnvironment` keeps, on a :class:`~tests.sim.disk.SimDisk`: the committed tables
live in ``disk.indexes`` and survive the process's crashes. A commit is a file-system call
of the disk (a planned crash may fall before or after it; a full or failing disk makes it
raise ``lmdb.DiskError``, as LMDB does).

Only the calls the bookie makes are here (bookie/storage/entry_storage.py,
bookie/storage/index_audit.py): environments with named tables, transactions, and cursors
positioned by key.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

import lmdb

from tests.sim.disk import SimFiles

_MAIN = b""  # the unnamed table, which lists the named ones (as LMDB's does)
Tables = dict[bytes, dict[bytes, bytes]]


class SimDatabase:
    """A named table's handle."""

    def __init__(self, name: bytes) -> None:
        self.name = name


class SimEnvironment:
    """An index environment in ``directory`` on a simulated disk."""

    def __init__(self, files: SimFiles, directory: Path) -> None:
        self._files = files
        self._directory = directory
        files.index_call("open", directory)
        files.disk.indexes.setdefault(directory, {_MAIN: {}})
        self._closed = False

    @property
    def committed(self) -> Tables:
        """The tables as last committed."""
        return self._files.disk.indexes[self._directory]

    def path(self) -> str:
        """The environment's directory."""
        return str(self._directory)

    def open_db(self, key: bytes, *, create: bool = True, **_: object) -> SimDatabase:
        """A named table's handle; created (committed at once) when missing and ``create``."""
        if key not in self.committed:
            if not create:
                raise lmdb.NotFoundError(f"no table {key!r}")
            with self.begin(write=True) as txn:
                txn.table(_MAIN, writing=True)[key] = b"table"
                txn.tables[key] = {}
        return SimDatabase(key)

    def begin(self, db: SimDatabase | None = None, write: bool = False) -> SimTransaction:
        """A transaction (read-only unless ``write``) whose default table is ``db``."""
        if self._closed:
            raise lmdb.Error("environment closed")
        return SimTransaction(self, db.name if db is not None else _MAIN, write)

    def commit(self, tables: Tables, growth: int) -> None:
        """Make a write transaction's tables the committed ones (atomic, durable)."""
        try:
            self._files.index_call("commit", self._directory, growth)
        except OSError as exc:
            raise lmdb.DiskError(f"mdb_txn_commit: {exc.strerror}") from exc
        self._files.disk.indexes[self._directory] = tables

    def close(self) -> None:
        """Close the environment."""
        self._closed = True


class SimTransaction:
    """A snapshot read or a write transaction (commits on a clean ``with`` exit)."""

    def __init__(self, env: SimEnvironment, default: bytes, write: bool) -> None:
        self._env = env
        self._default = default
        self._write = write
        self._copied: set[bytes] = set()
        self.tables: Tables = dict(env.committed)
        self.versions: dict[bytes, int] = {}
        self._growth = 0

    def __enter__(self) -> SimTransaction:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._write and kind is None:
            self._env.commit(self.tables, self._growth)

    def table(self, name: bytes | None, *, writing: bool = False) -> dict[bytes, bytes]:
        """A table's contents in this transaction (copied before its first change)."""
        name = self._default if name is None else name
        if name not in self.tables:
            raise lmdb.BadDbiError(f"no table {name!r}")
        if writing:
            if not self._write:
                raise lmdb.ReadonlyError("read-only transaction")
            if name not in self._copied:
                self.tables[name] = dict(self.tables[name])
                self._copied.add(name)
            self.versions[name] = self.versions.get(name, 0) + 1
        return self.tables[name]

    def _name(self, db: SimDatabase | None) -> bytes:
        return self._default if db is None else db.name

    def get(
        self, key: bytes, default: bytes | None = None, db: SimDatabase | None = None
    ) -> bytes | None:
        """The value of ``key``, or ``default``."""
        return self.table(self._name(db)).get(bytes(key), default)

    def put(
        self, key: bytes, value: bytes, *, overwrite: bool = True, db: SimDatabase | None = None
    ) -> bool:
        """Store ``value``; False when the key exists and not ``overwrite``."""
        table = self.table(self._name(db), writing=True)
        key = bytes(key)
        if not overwrite and key in table:
            return False
        self._growth += len(key) + len(value)
        table[key] = bytes(value)
        return True

    def replace(self, key: bytes, value: bytes, db: SimDatabase | None = None) -> bytes | None:
        """Store ``value``; the previous value or None."""
        table = self.table(self._name(db), writing=True)
        old = table.get(bytes(key))
        self._growth += len(key) + len(value)
        table[bytes(key)] = bytes(value)
        return old

    def pop(self, key: bytes, db: SimDatabase | None = None) -> bytes | None:
        """Remove ``key``; its value or None."""
        return self.table(self._name(db), writing=True).pop(bytes(key), None)

    def cursor(self, db: SimDatabase | None = None) -> SimCursor:
        """A cursor on a table of this transaction."""
        return SimCursor(self, self._name(db))


class SimCursor:
    """A cursor over one table, in key order (LMDB's positioning rules)."""

    def __init__(self, txn: SimTransaction, name: bytes) -> None:
        self._txn = txn
        self._name = name
        self._version = -1
        self._keys: list[bytes] = []
        self._pos: int | None = None

    def _sorted(self) -> list[bytes]:
        version = self._txn.versions.get(self._name, 0)
        if version != self._version:
            current = self._current_key()
            self._keys = sorted(self._txn.table(self._name))
            self._version = version
            if current is not None:
                self._pos = bisect.bisect_left(self._keys, current)
                if self._pos >= len(self._keys):
                    self._pos = None
        return self._keys

    def _current_key(self) -> bytes | None:
        if self._pos is None or self._pos >= len(self._keys):
            return None
        return self._keys[self._pos]

    def _at(self, pos: int) -> bool:
        keys = self._sorted()
        self._pos = pos if 0 <= pos < len(keys) else None
        return self._pos is not None

    def set_key(self, key: bytes) -> bool:
        """Position at ``key`` if present."""
        keys = self._sorted()
        pos = bisect.bisect_left(keys, bytes(key))
        if pos < len(keys) and keys[pos] == key:
            return self._at(pos)
        self._pos = None
        return False

    def set_range(self, key: bytes) -> bool:
        """Position at the first key at or after ``key``."""
        return self._at(bisect.bisect_left(self._sorted(), bytes(key)))

    def first(self) -> bool:
        """Position at the first key."""
        return self._at(0)

    def last(self) -> bool:
        """Position at the last key."""
        return self._at(len(self._sorted()) - 1)

    def next(self) -> bool:
        """Move to the next key (the first when unpositioned)."""
        self._sorted()
        return self._at(0 if self._pos is None else self._pos + 1)

    def prev(self) -> bool:
        """Move to the previous key (the last when unpositioned)."""
        keys = self._sorted()
        return self._at(len(keys) - 1 if self._pos is None else self._pos - 1)

    def key(self) -> bytes:
        """The current key (empty when unpositioned)."""
        self._sorted()
        return self._current_key() or b""

    def value(self) -> bytes:
        """The current value (empty when unpositioned)."""
        key = self.key()
        return self._txn.table(self._name).get(key, b"") if key else b""

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        self._sorted()
        if self._pos is None and not self.first():
            return
        while self._pos is not None:
            yield self.key(), self.value()
            self.next()

    def delete(self) -> bool:
        """Delete the current element and move to the one after it."""
        key = self.key()
        if not key:
            return False
        self._txn.table(self._name, writing=True).pop(key, None)
        pos = self._pos
        self._keys.remove(key)
        self._version = self._txn.versions.get(self._name, 0)
        self._pos = pos if pos is not None and pos < len(self._keys) else None
        return True

    def put(self, key: bytes, value: bytes, *, overwrite: bool = True) -> bool:
        """Store ``value`` at ``key`` (positions there)."""
        stored = self._txn.put(key, value, overwrite=overwrite, db=SimDatabase(self._name))
        self.set_key(key)
        return stored

    def putmulti(
        self, items: Iterable[tuple[bytes, bytes]], *, overwrite: bool = True
    ) -> tuple[int, int]:
        """Store every item; ``(items read, items stored)``."""
        consumed = added = 0
        for key, value in items:
            consumed += 1
            added += self._txn.put(key, value, overwrite=overwrite, db=SimDatabase(self._name))
        return consumed, added


def sim_index_opener(files: SimFiles) -> SimOpener:
    """The ``open_index`` of a storage environment on ``files``."""
    return SimOpener(files)


class SimOpener:
    """Opens :class:`SimEnvironment` s on one incarnation's files."""

    def __init__(self, files: SimFiles) -> None:
        self._files = files

    def __call__(self, directory: Path) -> SimEnvironment:
        return SimEnvironment(self._files, directory)


__all__ = ["SimCursor", "SimEnvironment", "SimTransaction", "sim_index_opener"]

"""A simulated file system that loses on a power loss whatever was not synced.

:class:`SimFiles` implements :class:`walog.spark.archive_files.ArchiveFiles` (plus
:meth:`SimFiles.write_file` and :meth:`SimFiles.read_file` for what Spark writes and what
a reader finds). It models a journaling local file system (ext4, xfs):

- changes to names (create, mkdir, rename, remove) go into a journal, committed in order:
  syncing a directory commits the journal up to the last change to that directory (so
  every earlier change too); a power loss keeps a committed prefix of the rest, of a
  length the seed draws. A rename is one journal record: it survives whole or not at all;
- a file's bytes are on the disk once the file is synced; a power loss keeps or drops the
  bytes of each file written since independently (the seed draws which), so a file whose
  name survived may come back empty.

:meth:`SimFiles.crash_at` makes the N-th call raise :class:`PowerLoss` before it acts;
:meth:`SimFiles.power_loss` then drops what the disk did not hold.
"""

from __future__ import annotations

import copy
import random
from pathlib import PurePath, PurePosixPath

from tests.sim.loop import Trace
from walog.spark.archive_files import DirEntry

ROOT_INODE = 0
Op = tuple[str, int, str, int, str]
"""A journal record: ``("link", dir, name, inode, "")``, ``("unlink", dir, name, 0, "")``
or ``("rename", dir, name, target dir, target name)``, directories by inode."""


class PowerLoss(Exception):
    """The host lost power in the middle of a call."""


class SimFiles:
    """The simulated file system of one host (see the module doc)."""

    def __init__(self, rng: random.Random, trace: Trace) -> None:
        self.rng = rng
        self.trace = trace
        self._kinds: dict[int, str] = {ROOT_INODE: "dir"}
        self._entries: dict[int, dict[str, int]] = {ROOT_INODE: {}}
        self._durable_entries: dict[int, dict[str, int]] = {ROOT_INODE: {}}
        self._data: dict[int, bytes] = {}
        self._durable_data: dict[int, bytes] = {}
        self._journal: list[tuple[Op, frozenset[int]]] = []
        """Uncommitted changes and the directories each one changes."""
        self._calls = 0
        self._crash_at: int | None = None

    # -- faults ----------------------------------------------------------------------------

    def crash_at(self, call: int | None) -> None:
        """Make call number ``call`` (counted from now, from 1) lose power; None: never."""
        self._calls = 0
        self._crash_at = call

    def power_loss(self) -> None:
        """The host loses power: keep a drawn prefix of the journal and a drawn subset of
        the unsynced files' bytes; everything else is gone."""
        kept = self.rng.randint(0, len(self._journal))
        self._commit(kept)
        for inode, data in self._data.items():
            if self._durable_data.get(inode) != data and self.rng.random() < 0.5:
                self._durable_data[inode] = data
        self.trace.log(f"fs POWER LOSS: kept {kept} uncommitted name changes")
        self._journal.clear()
        self._entries = copy.deepcopy(self._durable_entries)
        self._data = dict(self._durable_data)
        self._crash_at = None

    def _call(self, text: str) -> None:
        self._calls += 1
        if self._crash_at is not None and self._calls >= self._crash_at:
            self._crash_at = None
            self.trace.log(f"fs crash before {text}")
            raise PowerLoss(text)
        self.trace.log(f"fs {text}")

    # -- names -----------------------------------------------------------------------------

    def _lookup(self, path: PurePath) -> int | None:
        inode = ROOT_INODE
        for part in PurePosixPath(path).parts[1:]:
            entries = self._entries.get(inode)
            if entries is None or part not in entries:
                return None
            inode = entries[part]
        return inode

    def _parent(self, path: PurePath) -> int:
        inode = self._lookup(path.parent)
        if inode is None or self._kinds[inode] != "dir":
            raise FileNotFoundError(f"no directory {path.parent}")
        return inode

    def _change(self, op: Op, *dirs: int) -> None:
        _apply(self._entries, self._kinds, op)
        self._journal.append((op, frozenset(dirs)))

    def _commit(self, count: int) -> None:
        for op, _dirs in self._journal[:count]:
            _apply(self._durable_entries, self._kinds, op)
        del self._journal[:count]

    def _link(self, path: PurePath, kind: str) -> int:
        parent = self._parent(path)
        if path.name in self._entries[parent]:
            raise FileExistsError(str(path))
        inode = len(self._kinds)
        self._kinds[inode] = kind
        if kind == "dir":
            self._entries[inode] = {}
        self._change(("link", parent, path.name, inode, ""), parent)
        return inode

    # -- ArchiveFiles ----------------------------------------------------------------------

    def list_dir(self, path: PurePath) -> list[DirEntry]:
        """The entries of directory ``path``, sorted by name ([] when it does not exist)."""
        self._call(f"list_dir {path}")
        inode = self._lookup(path)
        if inode is None or self._kinds[inode] != "dir":
            return []
        return sorted(
            DirEntry(name, self._kinds[child] == "dir")
            for name, child in self._entries[inode].items()
        )

    def exists(self, path: PurePath) -> bool:
        """True when ``path`` names a file or a directory."""
        self._call(f"exists {path}")
        return self._lookup(path) is not None

    def make_dirs(self, path: PurePath) -> None:
        """Create directory ``path`` and its missing parents, each new one durably."""
        self._call(f"make_dirs {path}")
        for directory in [*reversed(PurePosixPath(path).parents), PurePosixPath(path)]:
            if self._lookup(directory) is None:
                self._link(directory, "dir")
                self._sync_dir(directory.parent)

    def create_empty(self, path: PurePath) -> None:
        """Create the empty file ``path``."""
        self._call(f"create_empty {path}")
        inode = self._link(path, "file")
        self._data[inode] = self._durable_data[inode] = b""

    def rename(self, source: PurePath, target: PurePath) -> None:
        """Rename ``source`` to ``target`` (``target`` absent)."""
        self._call(f"rename {source} -> {target}")
        if self._lookup(source) is None:
            raise FileNotFoundError(str(source))
        if self._lookup(target) is not None:
            raise FileExistsError(str(target))
        old, new = self._parent(source), self._parent(target)
        self._change(("rename", old, source.name, new, target.name), old, new)

    def remove_tree(self, path: PurePath) -> None:
        """Remove ``path`` and everything under it (nothing when it does not exist)."""
        self._call(f"remove_tree {path}")
        if self._lookup(path) is not None:
            parent = self._parent(path)
            self._change(("unlink", parent, path.name, 0, ""), parent)

    def sync_file(self, path: PurePath) -> None:
        """Put the bytes of file ``path`` on the disk."""
        self._call(f"sync_file {path}")
        inode = self._lookup(path)
        if inode is None:
            raise FileNotFoundError(str(path))
        self._durable_data[inode] = self._data[inode]

    def sync_dir(self, path: PurePath) -> None:
        """Commit the journal up to the last change to directory ``path``."""
        self._call(f"sync_dir {path}")
        self._sync_dir(path)

    def _sync_dir(self, path: PurePath) -> None:
        inode = self._lookup(path)
        if inode is None:
            raise FileNotFoundError(str(path))
        touching = [i for i, (_op, dirs) in enumerate(self._journal) if inode in dirs]
        if touching:
            self._commit(touching[-1] + 1)

    # -- what Spark writes, what readers find ----------------------------------------------

    def write_file(self, path: PurePath, data: bytes) -> None:
        """Create file ``path`` (and missing parents) holding ``data``, unsynced."""
        self._call(f"write_file {path} ({len(data)} bytes)")
        for directory in reversed(PurePosixPath(path).parents):
            if self._lookup(directory) is None:
                self._link(directory, "dir")
        inode = self._link(path, "file")
        self._data[inode] = data
        self._durable_data[inode] = b""

    def read_file(self, path: PurePath) -> bytes | None:
        """The bytes of file ``path``; None when there is no such file."""
        inode = self._lookup(path)
        return None if inode is None or self._kinds[inode] != "file" else self._data[inode]


def _apply(entries: dict[int, dict[str, int]], kinds: dict[int, str], op: Op) -> None:
    kind, parent, name, other, other_name = op
    if kind == "link":
        entries[parent][name] = other
        if kinds[other] == "dir":
            entries.setdefault(other, {})
    elif kind == "unlink":
        entries[parent].pop(name, None)
    elif kind == "rename":
        inode = entries[parent].pop(name, None)
        if inode is not None:
            entries[other][other_name] = inode


__all__ = ["PowerLoss", "SimFiles"]

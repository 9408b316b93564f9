"""A simulated disk for the bookie's storage engine: only what was synced survives a crash.

:class:`SimDisk` is one machine's persistent state: directories, files and the committed
index (tests/sim/lmdb.py), and the faults planned for it. :class:`SimFiles` is one process
incarnation's view of it and implements :class:`bookie.storage.files.Files`, so the real engine
(bookie/storage/engine.py) runs on it unchanged.

What survives :meth:`SimDisk.crash` follows POSIX, not one file system's kindness:

- a file's bytes as of its last ``fsync``/``fdatasync``; with probability
  ``keep_unsynced`` also a prefix of the changes made since (written in order and cut at any
  byte: a torn tail);
- a directory's entries (creations, renames, removals) as of its last ``fsync_dir``;
  directories themselves are durable once made;
- the index's last committed transaction (LMDB commits with a sync).

Faults: :meth:`SimDisk.crash_after` kills the process at its n-th next call (between any
two file-system calls, inside a checkpoint too); :meth:`SimDisk.fail_next` fails the next
calls of a kind with EIO (transient); :meth:`SimDisk.break_file` makes a file's reads fail
for good (bad sectors); :attr:`SimDisk.capacity` and :meth:`SimDisk.fill` give ENOSPC.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bookie.storage.files import Bytes


class SimCrash(BaseException):
    """The simulated process died at this call (a crash the simulator injected). A
    BaseException, so that no ``except Exception`` of the engine carries on after it."""


@dataclasses.dataclass(eq=False)
class _Inode:
    data: bytearray = dataclasses.field(default_factory=bytearray)
    durable: bytes = b""
    # Changes since the last sync, in order: ("w", offset, bytes) or ("t", length, b"").
    pending: list[tuple[str, int, bytes]] = dataclasses.field(default_factory=list)
    reserved: int = 0  # bytes reserved by fallocate

    def footprint(self) -> int:
        return max(len(self.data), self.reserved)


@dataclasses.dataclass
class _Handle:
    inode: _Inode
    path: Path
    position: int = 0


@dataclasses.dataclass
class _FailNext:
    kind: str
    count: int
    path_part: str


class SimDisk:
    """One machine's disk (see the module's description).

    Args:
        rng: the schedule's random source (torn tails).
        keep_unsynced: probability that a crash keeps a prefix of a file's unsynced changes.
        capacity: bytes the disk holds (None: unlimited).
    """

    def __init__(
        self, rng: random.Random, *, keep_unsynced: float = 0.3, capacity: int | None = None
    ) -> None:
        self.rng = rng
        self.keep_unsynced = keep_unsynced
        self.capacity = capacity
        self._capacity = capacity
        self.filled = 0
        """Bytes taken by other data (:meth:`fill`)."""
        self.dirs: dict[Path, dict[str, _Inode]] = {Path("/"): {}}
        self.durable_dirs: dict[Path, dict[str, _Inode]] = {Path("/"): {}}
        self.subdirs: dict[Path, list[str]] = {}
        self.indexes: dict[Path, dict[bytes, dict[bytes, bytes]]] = {}
        """Committed index tables by index directory (tests/sim/lmdb.py)."""
        self.open_inodes: dict[int, _Inode] = {}  # by id: unlinked but still open
        self.locks: dict[Path, int] = {}  # lock file -> holding incarnation
        self.calls = 0
        self.crashes = 0
        self.incarnation = 0
        self._countdown: int | None = None
        self._fail_next: list[_FailNext] = []
        self._broken: set[Path] = set()
        self._inspecting = 0

    # -- fault plans ------------------------------------------------------------------------

    def crash_after(self, calls: int) -> None:
        """Kill the process at its ``calls``-th next file-system call (1: the next)."""
        self._countdown = max(1, calls)

    def cancel_crash(self) -> None:
        """Drop a planned :meth:`crash_after`."""
        self._countdown = None

    def fail_next(self, kind: str, count: int = 1, path_part: str = "") -> None:
        """Fail the next ``count`` calls of ``kind`` (on a path containing ``path_part``)
        with EIO. Kinds: open write read sync truncate fallocate rename unlink dirsync list
        commit."""
        self._fail_next.append(_FailNext(kind, count, path_part))

    def break_file(self, path: Path) -> None:
        """Reads of ``path`` fail with EIO from now on (bad sectors)."""
        self._broken.add(path)

    def fill(self, size: int) -> None:
        """Other data takes ``size`` more bytes (negative: frees)."""
        self.filled = max(0, self.filled + size)

    def heal(self) -> None:
        """End every planned fault (a crash planned included): the disk has room again."""
        self.capacity = self._capacity
        self._countdown = None
        self._fail_next.clear()
        self._broken.clear()
        self.filled = 0

    @contextlib.contextmanager
    def inspecting(self) -> Iterator[None]:
        """Calls made inside do not count towards a planned crash and meet no fault (an
        invariant checker looking at the disk)."""
        self._inspecting += 1
        try:
            yield
        finally:
            self._inspecting -= 1

    # -- accounting -------------------------------------------------------------------------

    def used(self) -> int:
        """Bytes in use: every file's footprint, open unlinked ones included, and
        :attr:`filled`."""
        inodes = {id(i): i for entries in self.dirs.values() for i in entries.values()}
        inodes.update(self.open_inodes)
        return self.filled + sum(i.footprint() for i in inodes.values())

    def check(self, files: SimFiles, kind: str, path: Path | None) -> None:
        """Called by every file-system call: a planned crash, then planned faults."""
        if files.dead:
            raise SimCrash(f"{kind} after the crash")
        if self._inspecting:
            return
        self.calls += 1
        if self._countdown is not None:
            self._countdown -= 1
            if self._countdown <= 0:
                self._countdown = None
                files.die()
                raise SimCrash(f"crash at {kind} {path}")
        for plan in self._fail_next:
            if plan.kind == kind and plan.count > 0 and plan.path_part in str(path or ""):
                plan.count -= 1
                self._fail_next = [p for p in self._fail_next if p.count > 0]
                raise OSError(errno.EIO, f"injected I/O error ({kind})", str(path))
        if kind == "read" and path in self._broken:
            raise OSError(errno.EIO, "injected bad sector", str(path))

    def check_space(self, growth: int) -> None:
        """ENOSPC when ``growth`` more bytes would not fit."""
        full = self.capacity is not None and self.used() + growth > self.capacity
        if growth > 0 and full and not self._inspecting:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")

    # -- crash --------------------------------------------------------------------------------

    def crash(self) -> None:
        """Power loss or process death: every directory back to its synced entries, every
        file to its synced bytes (plus, sometimes, a torn prefix of later changes)."""
        self.crashes += 1
        self.incarnation += 1
        self._countdown = None
        self.locks.clear()
        self.open_inodes.clear()
        self.dirs = self._survivors(torn=True)
        self.durable_dirs = {d: dict(entries) for d, entries in self.dirs.items()}

    def survivor_copy(self) -> SimDisk:
        """A new disk holding what a crash now would leave, synced bytes only (for a look at
        what the bookie would find on restart, without crashing it)."""
        copy = SimDisk(random.Random(0), keep_unsynced=0.0)
        copy.dirs = self._survivors(torn=False)
        copy.durable_dirs = {d: dict(entries) for d, entries in copy.dirs.items()}
        copy.subdirs = {d: list(names) for d, names in self.subdirs.items()}
        copy.indexes = dict(self.indexes)  # committed tables are never changed in place
        return copy

    def _survivors(self, *, torn: bool) -> dict[Path, dict[str, _Inode]]:
        recovered: dict[int, _Inode] = {}
        dirs: dict[Path, dict[str, _Inode]] = {}
        for directory in self.dirs:
            entries = self.durable_dirs.get(directory, {})
            dirs[directory] = {
                name: recovered.setdefault(id(inode), self._survivor(inode, torn))
                for name, inode in sorted(entries.items())
            }
        return dirs

    def _survivor(self, inode: _Inode, torn: bool) -> _Inode:
        data = bytearray(inode.durable)
        if torn and inode.pending and self.rng.random() < self.keep_unsynced:
            kept = self.rng.randint(0, len(inode.pending))
            for index, (op, at, chunk) in enumerate(inode.pending[:kept]):
                if op == "t":
                    del data[at:]
                    continue
                if index == kept - 1:
                    chunk = chunk[: self.rng.randint(0, len(chunk))]  # torn
                if len(data) < at:
                    data.extend(bytes(at - len(data)))
                data[at : at + len(chunk)] = chunk
        return _Inode(data, bytes(data))

    # -- paths -------------------------------------------------------------------------------

    def lookup(self, path: Path) -> _Inode | None:
        """The file at ``path`` now, or None."""
        return self.dirs.get(path.parent, {}).get(path.name)

    def files_in(self, directory: Path) -> list[Path]:
        """The files of a directory now, by name."""
        return [directory / name for name in sorted(self.dirs.get(directory, {}))]

    def is_dir(self, path: Path) -> bool:
        """Whether ``path`` is a directory."""
        return path in self.dirs


class SimFiles:
    """One process incarnation's :class:`bookie.storage.files.Files` on a :class:`SimDisk`.

    Args:
        disk: the machine's disk.
        on_crash: called (at once, from inside the call that crashed) when a planned crash
            kills this incarnation.
    """

    def __init__(self, disk: SimDisk, on_crash: Callable[[], None] = lambda: None) -> None:
        self.disk = disk
        self.incarnation = disk.incarnation
        self.dead = False
        self._on_crash = on_crash
        self._handles: dict[int, _Handle] = {}
        self._next_fd = 3

    def die(self) -> None:
        """This incarnation is dead: every later call raises :class:`SimCrash`."""
        if not self.dead:
            self.dead = True
            self._on_crash()

    def _check(self, kind: str, path: Path | None) -> None:
        self.disk.check(self, kind, path)

    def _handle(self, fd: int) -> _Handle:
        handle = self._handles.get(fd)
        if handle is None:
            raise OSError(errno.EBADF, "Bad file descriptor (simulated)")
        return handle

    def _dir(self, path: Path) -> dict[str, _Inode]:
        entries = self.disk.dirs.get(path.parent)
        if entries is None:
            raise FileNotFoundError(errno.ENOENT, "No such directory (simulated)", str(path))
        return entries

    # -- Files ------------------------------------------------------------------------------

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        """See :meth:`bookie.storage.files.Files.open`."""
        self._check("open", path)
        entries = self._dir(path)
        inode = entries.get(path.name)
        if inode is None:
            if not flags & os.O_CREAT:
                raise FileNotFoundError(errno.ENOENT, "No such file (simulated)", str(path))
            inode = entries[path.name] = _Inode()
        elif flags & os.O_CREAT and flags & os.O_EXCL:
            raise FileExistsError(errno.EEXIST, "File exists (simulated)", str(path))
        if flags & os.O_TRUNC and inode.data:
            del inode.data[:]
            inode.pending.append(("t", 0, b""))
        fd = self._next_fd
        self._next_fd += 1
        self._handles[fd] = _Handle(inode, path)
        self.disk.open_inodes[id(inode)] = inode
        return fd

    def close(self, fd: int) -> None:
        """See :meth:`bookie.storage.files.Files.close`."""
        if self.dead:
            raise SimCrash("close after the crash")
        handle = self._handles.pop(fd, None)
        if handle is None:
            raise OSError(errno.EBADF, "Bad file descriptor (simulated)")
        if not any(h.inode is handle.inode for h in self._handles.values()):
            self.disk.open_inodes.pop(id(handle.inode), None)
        if self.disk.locks.get(handle.path) == self.incarnation:
            del self.disk.locks[handle.path]

    def write(self, fd: int, data: Bytes) -> int:
        """See :meth:`bookie.storage.files.Files.write`."""
        handle = self._handle(fd)
        self._check("write", handle.path)
        chunk = bytes(data)
        inode, at = handle.inode, handle.position
        self.disk.check_space(at + len(chunk) - inode.footprint())
        if len(inode.data) < at:
            inode.data.extend(bytes(at - len(inode.data)))
        inode.data[at : at + len(chunk)] = chunk
        inode.pending.append(("w", at, chunk))
        handle.position = at + len(chunk)
        return len(chunk)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        """See :meth:`bookie.storage.files.Files.pread`."""
        handle = self._handle(fd)
        self._check("read", handle.path)
        return bytes(handle.inode.data[offset : offset + length])

    def fsync(self, fd: int) -> None:
        """See :meth:`bookie.storage.files.Files.fsync`."""
        handle = self._handle(fd)
        self._check("sync", handle.path)
        handle.inode.durable = bytes(handle.inode.data)
        handle.inode.pending.clear()

    fdatasync = fsync

    def ftruncate(self, fd: int, length: int) -> None:
        """See :meth:`bookie.storage.files.Files.ftruncate`."""
        handle = self._handle(fd)
        self._check("truncate", handle.path)
        inode = handle.inode
        self.disk.check_space(length - inode.footprint())
        if length < len(inode.data):
            del inode.data[length:]
        else:
            inode.data.extend(bytes(length - len(inode.data)))
        inode.pending.append(("t", length, b""))

    def size(self, fd: int) -> int:
        """See :meth:`bookie.storage.files.Files.size`."""
        return len(self._handle(fd).inode.data)

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        """See :meth:`bookie.storage.files.Files.fallocate`."""
        handle = self._handle(fd)
        self._check("fallocate", handle.path)
        inode = handle.inode
        self.disk.check_space(offset + length - inode.footprint())
        inode.reserved = max(inode.reserved, offset + length)

    def drop_cache(self, fd: int) -> None:
        """See :meth:`bookie.storage.files.Files.drop_cache` (nothing to drop here)."""
        self._handle(fd)

    def replace(self, source: Path, target: Path) -> None:
        """See :meth:`bookie.storage.files.Files.replace`."""
        self._check("rename", source)
        entries = self._dir(source)
        inode = entries.pop(source.name, None)
        if inode is None:
            raise FileNotFoundError(errno.ENOENT, "No such file (simulated)", str(source))
        self._dir(target)[target.name] = inode

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None:
        """See :meth:`bookie.storage.files.Files.unlink`."""
        self._check("unlink", path)
        if self._dir(path).pop(path.name, None) is None and not missing_ok:
            raise FileNotFoundError(errno.ENOENT, "No such file (simulated)", str(path))

    def exists(self, path: Path) -> bool:
        """See :meth:`bookie.storage.files.Files.exists`."""
        self._check("list", path)
        return self.disk.is_dir(path) or self.disk.lookup(path) is not None

    def listdir(self, path: Path) -> list[str]:
        """See :meth:`bookie.storage.files.Files.listdir`."""
        self._check("list", path)
        names = list(self.disk.dirs.get(path, {}))
        names += self.disk.subdirs.get(path, ())
        return sorted(names)

    def makedirs(self, path: Path) -> None:
        """See :meth:`bookie.storage.files.Files.makedirs`."""
        self._check("dirsync", path)
        for directory in (*reversed(path.parents), path):
            if directory not in self.disk.dirs:
                self.disk.dirs[directory] = {}
                self.disk.durable_dirs[directory] = {}
                if directory != directory.parent:
                    self.disk.subdirs.setdefault(directory.parent, []).append(directory.name)

    def fsync_dir(self, path: Path) -> None:
        """See :meth:`bookie.storage.files.Files.fsync_dir`."""
        self._check("dirsync", path)
        if not self.disk.is_dir(path):
            raise FileNotFoundError(errno.ENOENT, "No such directory (simulated)", str(path))
        self.disk.durable_dirs[path] = dict(self.disk.dirs[path])

    def lock(self, path: Path) -> int:
        """See :meth:`bookie.storage.files.Files.lock`."""
        holder = self.disk.locks.get(path)
        if holder is not None and holder != self.incarnation:
            raise BlockingIOError(errno.EWOULDBLOCK, "lock held (simulated)", str(path))
        fd = self.open(path, os.O_RDWR | os.O_CREAT)
        self.disk.locks[path] = self.incarnation
        return fd

    # -- for the index (tests/sim/lmdb.py) ---------------------------------------------------

    def index_call(self, kind: str, directory: Path, growth: int = 0) -> None:
        """An index call (``commit``, ``read``, ``open``) meets planned crashes and faults
        like a file call; a commit that would not fit fails with ENOSPC."""
        self._check(kind, directory / "data.mdb")
        if kind == "commit":
            self.disk.check_space(growth)


def describe(disk: SimDisk) -> dict[str, Any]:
    """A short summary of a disk, for traces."""
    files = sum(len(entries) for entries in disk.dirs.values())
    return {"files": files, "used": disk.used(), "crashes": disk.crashes}


__all__ = ["SimCrash", "SimDisk", "SimFiles", "describe"]

"""The file-system calls of a bookie's storage engine, behind one interface.

The journal, the entry logs, the index's directory and the start-up code reach the disk
only through a :class:`Files`: :data:`LOCAL_FILES` in a bookie process, a simulated file
system in the deterministic simulator (tests/sim/disk.py), which keeps only what was synced
when a crash comes and injects full and failing disks. The calls mirror the ``os`` functions
they stand for (file descriptors, byte offsets, ``OSError`` with an ``errno``), so the code
above reads as plain POSIX.

Durability follows POSIX, not one file system's habits: written bytes survive a crash once
the file was synced (``fsync``/``fdatasync``), and a file's creation, renaming or removal
once its directory was synced (:meth:`Files.fsync_dir`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Protocol, TypeAlias

Bytes: TypeAlias = bytes | bytearray | memoryview
"""What may be written."""


class Files(Protocol):
    """The calls the storage engine makes on its directories (blocking)."""

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        """``os.open``: a file descriptor positioned at the start."""

    def close(self, fd: int) -> None:
        """``os.close``."""

    def write(self, fd: int, data: Bytes) -> int:
        """``os.write`` at the descriptor's position; the bytes written."""

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        """``os.pread``: up to ``length`` bytes from ``offset`` (fewer at the end)."""

    def fsync(self, fd: int) -> None:
        """``os.fsync``: the file's data and size are durable once it returns."""

    def fdatasync(self, fd: int) -> None:
        """``os.fdatasync``: the file's data (and the size needed to read it) durable."""

    def ftruncate(self, fd: int, length: int) -> None:
        """``os.ftruncate``."""

    def size(self, fd: int) -> int:
        """The file's size (``os.fstat(fd).st_size``)."""

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        """``os.posix_fallocate``: reserve the blocks of a range (OSError when it cannot)."""

    def drop_cache(self, fd: int) -> None:
        """Let the system drop the file's cached pages (``POSIX_FADV_DONTNEED``)."""

    def replace(self, source: Path, target: Path) -> None:
        """``os.replace``: rename, replacing ``target`` if it exists."""

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None:
        """Remove a file (FileNotFoundError when absent, unless ``missing_ok``)."""

    def exists(self, path: Path) -> bool:
        """Whether a file or directory exists at ``path``."""

    def listdir(self, path: Path) -> list[str]:
        """The names in a directory (unordered); [] when it does not exist."""

    def makedirs(self, path: Path) -> None:
        """Create a directory and its missing parents (no error when it exists)."""

    def fsync_dir(self, path: Path) -> None:
        """Sync a directory: creations, renames and removals in it become durable."""

    def lock(self, path: Path) -> int:
        """Open (creating) ``path`` and take an exclusive lock on it, without waiting:
        the descriptor, whose :meth:`close` releases it; BlockingIOError when another
        holder has it."""


class LocalFiles:
    """:class:`Files` on the machine's own file systems."""

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        """See :meth:`Files.open`."""
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        """See :meth:`Files.close`."""
        os.close(fd)

    def write(self, fd: int, data: Bytes) -> int:
        """See :meth:`Files.write`."""
        return os.write(fd, data)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        """See :meth:`Files.pread`."""
        return os.pread(fd, length, offset)

    def fsync(self, fd: int) -> None:
        """See :meth:`Files.fsync`."""
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        """See :meth:`Files.fdatasync`."""
        os.fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        """See :meth:`Files.ftruncate`."""
        os.ftruncate(fd, length)

    def size(self, fd: int) -> int:
        """See :meth:`Files.size`."""
        return os.fstat(fd).st_size

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        """See :meth:`Files.fallocate`."""
        os.posix_fallocate(fd, offset, length)

    def drop_cache(self, fd: int) -> None:
        """See :meth:`Files.drop_cache`."""
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def replace(self, source: Path, target: Path) -> None:
        """See :meth:`Files.replace`."""
        os.replace(source, target)

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None:
        """See :meth:`Files.unlink`."""
        path.unlink(missing_ok=missing_ok)

    def exists(self, path: Path) -> bool:
        """See :meth:`Files.exists`."""
        return path.exists()

    def listdir(self, path: Path) -> list[str]:
        """See :meth:`Files.listdir`."""
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def makedirs(self, path: Path) -> None:
        """See :meth:`Files.makedirs`."""
        path.mkdir(parents=True, exist_ok=True)

    def fsync_dir(self, path: Path) -> None:
        """See :meth:`Files.fsync_dir`."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, path: Path) -> int:
        """See :meth:`Files.lock`."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        return fd


LOCAL_FILES: Files = LocalFiles()
"""The machine's own file systems (what a bookie process uses)."""


def probe_write(files: Files, directory: Path) -> None:
    """Write and sync a block in ``directory``, then remove it (OSError when it fails)."""
    path = directory / "probe.tmp"
    fd = files.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(files, fd, bytes(4096))
        files.fsync(fd)
    finally:
        files.close(fd)
        files.unlink(path)


def write_all(files: Files, fd: int, data: Bytes) -> None:
    """Write every byte of ``data`` at the descriptor's position (short writes resumed)."""
    with memoryview(data) as whole:
        view = whole
        while view:
            view = view[files.write(fd, view) :]


__all__ = ["LOCAL_FILES", "Bytes", "Files", "LocalFiles", "probe_write", "write_all"]

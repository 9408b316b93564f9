"""The file operations the archive job puts its output in place with, behind one interface.

:class:`ArchiveFiles` is every operation :mod:`walog.spark.archive_publish` needs: list a
directory, create one, create an empty file, read and write a small file (the archive's
version marker), rename, remove a tree, and make a file or a directory durable.
:class:`LocalFiles` does them on the local file system (or a mount of one) with ``os``; a
simulated file system that loses what was not synced on a power loss stands in for it in
the simulator (tests/sim), and recording wrappers in the tests.

Paths are :class:`~pathlib.PurePath` objects; the archive passes absolute ones.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path, PurePath
from typing import NamedTuple, Protocol

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class DirEntry(NamedTuple):
    """One entry of a directory listing."""

    name: str
    is_dir: bool


class ArchiveFiles(Protocol):
    """The file system the archive's output is published on."""

    def list_dir(self, path: PurePath) -> list[DirEntry]:
        """The entries of directory ``path``, sorted by name ([] when it does not exist)."""

    def exists(self, path: PurePath) -> bool:
        """True when ``path`` names a file or a directory."""

    def make_dirs(self, path: PurePath) -> None:
        """Create directory ``path`` and its missing parents, each new one durably (the
        parent of every directory created is synced after it)."""

    def create_empty(self, path: PurePath) -> None:
        """Create the empty file ``path`` (not synced: its directory is)."""

    def read_file(self, path: PurePath) -> bytes | None:
        """The bytes of file ``path``; None when there is no such file."""

    def write_file(self, path: PurePath, data: bytes) -> None:
        """Create file ``path`` holding ``data``, replacing any file there (not synced)."""

    def rename(self, source: PurePath, target: PurePath) -> None:
        """Rename ``source`` to ``target`` atomically (same file system; ``target`` absent)."""

    def remove_tree(self, path: PurePath) -> None:
        """Remove ``path`` and everything under it (nothing when it does not exist)."""

    def sync_file(self, path: PurePath) -> None:
        """Make the contents of file ``path`` durable (``fsync``)."""

    def sync_dir(self, path: PurePath) -> None:
        """Make the entries of directory ``path`` durable (``fsync`` of the directory)."""


class LocalFiles:
    """:class:`ArchiveFiles` on the local file system.

    A failed ``fsync`` raises :class:`OSError` naming the path: what it covered may not be
    on the disk, so nothing that depends on it may go on.
    """

    def list_dir(self, path: PurePath) -> list[DirEntry]:
        """The entries of directory ``path``, sorted by name ([] when it does not exist)."""
        try:
            with os.scandir(path) as entries:
                found = [DirEntry(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        except FileNotFoundError:
            return []
        return sorted(found)

    def exists(self, path: PurePath) -> bool:
        """True when ``path`` names a file or a directory."""
        return os.path.lexists(path)

    def make_dirs(self, path: PurePath) -> None:
        """Create directory ``path`` and its missing parents, each new one durably."""
        missing: list[Path] = []
        here = Path(path)
        while not here.is_dir():
            missing.append(here)
            if here.parent == here:
                break
            here = here.parent
        for directory in reversed(missing):
            directory.mkdir(exist_ok=True)
            self.sync_dir(directory.parent)

    def create_empty(self, path: PurePath) -> None:
        """Create the empty file ``path`` (not synced: its directory is)."""
        Path(path).touch()

    def read_file(self, path: PurePath) -> bytes | None:
        """The bytes of file ``path``; None when there is no such file."""
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            return None

    def write_file(self, path: PurePath, data: bytes) -> None:
        """Create file ``path`` holding ``data``, replacing any file there (not synced)."""
        Path(path).write_bytes(data)

    def rename(self, source: PurePath, target: PurePath) -> None:
        """Rename ``source`` to ``target`` atomically (same file system; ``target`` absent)."""
        os.rename(source, target)

    def remove_tree(self, path: PurePath) -> None:
        """Remove ``path`` and everything under it (nothing when it does not exist)."""
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)

    def sync_file(self, path: PurePath) -> None:
        """Make the contents of file ``path`` durable (``fsync``)."""
        _fsync(path, os.O_RDONLY)

    def sync_dir(self, path: PurePath) -> None:
        """Make the entries of directory ``path`` durable (``fsync`` of the directory)."""
        _fsync(path, os.O_RDONLY | os.O_DIRECTORY)


def _fsync(path: PurePath, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    except OSError as exc:
        # fsync's own error names no file; the caller must know which one is not durable.
        code = exc.errno if exc.errno is not None else errno.EIO
        raise OSError(code, f"could not sync to disk: {exc.strerror}", str(path)) from exc
    finally:
        os.close(fd)


def archive_root(to: str | os.PathLike[str]) -> Path:
    """The absolute archive root named by ``to``.

    Raises:
        ValueError: ``to`` is a URI (``s3a://...``, ``hdfs://...``, ``file://...``): the
            archive writes, renames and syncs through the local file system API only, so
            its directory must be a path on a mounted file system.
    """
    text = os.fspath(to)
    if _URI.match(text):
        raise ValueError(
            f"archive directory {text!r} is a URI; walog archive writes to a directory "
            "path on a mounted file system (a local disk or a shared mount seen by the "
            "driver and every executor)"
        )
    return Path(text).absolute()


__all__ = ["ArchiveFiles", "DirEntry", "LocalFiles", "archive_root"]

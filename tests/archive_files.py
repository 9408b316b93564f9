"""A recording :class:`~walog.spark.archive_files.ArchiveFiles` for the archive's tests, and
the durability model that tells from a recording what a power loss could not have taken.

:class:`RecordingFiles` wraps a real implementation and writes each call into an event list
(shared with whatever else a test records, such as the mark). :func:`durable_after` replays
the recorded calls: a file is durable once synced, a directory's entries once the
directory is synced after their last change; a rename carries what was durable under its
source to its target and changes both parents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import PurePath

from walog.spark.archive_files import ArchiveFiles, DirEntry


@dataclasses.dataclass(frozen=True)
class Call:
    """One recorded call: its name, its paths, and what the probe saw just before it."""

    name: str
    paths: tuple[PurePath, ...]
    seen: object = None


class RecordingFiles:
    """An :class:`ArchiveFiles` that records every call into ``events`` before making it.

    Args:
        inner: the file system that does the work.
        events: where calls are appended (a fresh list when None).
        probe: called before each call; its answer is kept in :attr:`Call.seen`.
    """

    def __init__(
        self,
        inner: ArchiveFiles,
        events: list[object] | None = None,
        probe: Callable[[], object] | None = None,
    ) -> None:
        self.inner = inner
        self.events: list[object] = [] if events is None else events
        self.probe = probe

    def _record(self, name: str, *paths: PurePath) -> None:
        seen = self.probe() if self.probe is not None else None
        self.events.append(Call(name, tuple(paths), seen))

    @property
    def calls(self) -> list[Call]:
        """The recorded file calls, in order."""
        return [e for e in self.events if isinstance(e, Call)]

    def list_dir(self, path: PurePath) -> list[DirEntry]:
        """Recorded :meth:`ArchiveFiles.list_dir`."""
        self._record("list_dir", path)
        return self.inner.list_dir(path)

    def exists(self, path: PurePath) -> bool:
        """Recorded :meth:`ArchiveFiles.exists`."""
        self._record("exists", path)
        return self.inner.exists(path)

    def make_dirs(self, path: PurePath) -> None:
        """Recorded :meth:`ArchiveFiles.make_dirs`."""
        self._record("make_dirs", path)
        self.inner.make_dirs(path)

    def create_empty(self, path: PurePath) -> None:
        """Recorded :meth:`ArchiveFiles.create_empty`."""
        self._record("create_empty", path)
        self.inner.create_empty(path)

    def read_file(self, path: PurePath) -> bytes | None:
        """Recorded :meth:`ArchiveFiles.read_file`."""
        self._record("read_file", path)
        return self.inner.read_file(path)

    def write_file(self, path: PurePath, data: bytes) -> None:
        """Recorded :meth:`ArchiveFiles.write_file`."""
        self._record("write_file", path)
        self.inner.write_file(path, data)

    def rename(self, source: PurePath, target: PurePath) -> None:
        """Recorded :meth:`ArchiveFiles.rename`."""
        self._record("rename", source, target)
        self.inner.rename(source, target)

    def remove_tree(self, path: PurePath) -> None:
        """Recorded :meth:`ArchiveFiles.remove_tree`."""
        self._record("remove_tree", path)
        self.inner.remove_tree(path)

    def sync_file(self, path: PurePath) -> None:
        """Recorded :meth:`ArchiveFiles.sync_file`."""
        self._record("sync_file", path)
        self.inner.sync_file(path)

    def sync_dir(self, path: PurePath) -> None:
        """Recorded :meth:`ArchiveFiles.sync_dir`."""
        self._record("sync_dir", path)
        self.inner.sync_dir(path)


def _under(path: PurePath, top: PurePath) -> bool:
    return path == top or top in path.parents


def durable_after(calls: Iterable[Call]) -> set[PurePath]:
    """The paths whose contents (a file's bytes, a directory's entries) a power loss right
    after ``calls`` leaves as they are; anything written by others (Spark) counts as
    unsynced until synced here."""
    durable: set[PurePath] = set()
    for call in calls:
        if call.name in ("sync_file", "sync_dir", "make_dirs"):
            durable.add(call.paths[0])
        elif call.name == "create_empty":
            durable.add(call.paths[0])  # empty: nothing to lose but its entry
            durable.discard(call.paths[0].parent)
        elif call.name == "write_file":
            durable.discard(call.paths[0])  # its bytes, until synced
            durable.discard(call.paths[0].parent)
        elif call.name == "remove_tree":
            (gone,) = call.paths
            durable = {p for p in durable if not _under(p, gone)}
            durable.discard(gone.parent)
        elif call.name == "rename":
            source, target = call.paths
            durable = {
                target / p.relative_to(source) if _under(p, source) else p
                for p in durable
                if not _under(p, target)
            }
            durable.discard(source.parent)
            durable.discard(target.parent)
    return durable


def tree(files: ArchiveFiles, top: PurePath, *, skip: Iterable[str] = ()) -> list[PurePath]:
    """``top`` and every file and directory under it, except ``top``'s entries in ``skip``."""
    out = [top]
    for entry in files.list_dir(top):
        if entry.name in skip:
            continue
        child = top / entry.name
        out.extend(tree(files, child) if entry.is_dir else [child])
    return out


__all__ = ["Call", "RecordingFiles", "durable_after", "tree"]

"""Publishing an archive run's output: durable on disk first, marked archived only then.

Retention with ``require_archived`` deletes the bookies' copies of every ledger before the
log's ``archived_through`` mark, so the mark may only move once the archive's files would
survive a power loss of their host. Spark writes its files without syncing them, and its
``_SUCCESS`` file may reach the disk before the files it vouches for. So, in this order
(:func:`publish`; each step only after the one before it returned):

1. **Seal** the staging directory: sync every file Spark wrote, then each directory
   bottom-up (a directory after everything in it), then create :data:`SYNCED` and sync the
   staging directory again. A staging directory is trusted by a later run only when it
   holds :data:`SYNCED` (:func:`staged_write_finished`); one without it is written again.
2. **Move** each ``ledger=<id>`` directory into the archive root by rename (whatever stood
   at the target belongs to no finished archive and is removed first).
3. **Sync the root**, which makes the renames durable, then the root's parent, which holds
   the root's own entry (created by the first run).
4. **Mark**: only now the caller's ``mark`` (one CAS on the log's metadata) runs.

A crash at any point leaves either the mark unmoved (a rerun finishes or redoes the run) or
every published file and directory on the disk.

Before a run writes anything, :func:`publish_marker` checks the archive's format version
(:data:`walog.log.archive_layout.MARKER`) and, in an archive that has no marker yet,
publishes one the same way: written under a temporary name, synced, renamed into place,
the root synced. The functions here touch the disk only
through :class:`~walog.spark.archive_files.ArchiveFiles`, so the simulator can run them on
a file system that loses what was not synced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import PurePath
from typing import TypeVar

from walog import mutations
from walog.log.archive_layout import ARCHIVE_FORMAT, MARKER, marker_bytes, marker_format
from walog.spark.archive_files import ArchiveFiles

T = TypeVar("T")

SUCCESS = "_SUCCESS"
"""Spark's file saying a write finished (not that it is on the disk)."""
SYNCED = "_SYNCED"
"""Created in a staging directory once everything in it is synced."""


def staged_write_finished(files: ArchiveFiles, staging: PurePath) -> bool:
    """True when ``staging`` holds a finished write that a power loss cannot have torn:
    one sealed by :func:`seal`. Anything else there must be written again."""
    if mutations.enabled("archive_marks_unsynced_output"):
        return files.exists(staging / SUCCESS)
    return files.exists(staging / SYNCED)


def sync_tree(files: ArchiveFiles, path: PurePath) -> None:
    """Sync every file under directory ``path``, then each directory after its contents."""
    for entry in files.list_dir(path):
        child = path / entry.name
        if entry.is_dir:
            sync_tree(files, child)
        else:
            files.sync_file(child)
    files.sync_dir(path)


def seal(files: ArchiveFiles, staging: PurePath) -> None:
    """Make the finished write in ``staging`` durable, then say so with :data:`SYNCED`."""
    sync_tree(files, staging)
    files.create_empty(staging / SYNCED)
    files.sync_dir(staging)


def move_ledger(files: ArchiveFiles, staging: PurePath, root: PurePath, name: str) -> bool:
    """Rename ``staging/name`` to ``root/name``; False when there is nothing to move (moved
    by an earlier attempt, or the ledger holds no records)."""
    source, target = staging / name, root / name
    if not files.exists(source):
        return False
    if files.exists(target):
        # Not marked archived, so no finished run wrote it: leftovers of an aborted one.
        files.remove_tree(target)
    files.rename(source, target)
    return True


def publish_marker(files: ArchiveFiles, root: PurePath) -> int:
    """Check the format version of the archive at ``root`` (an existing directory), and
    publish its marker durably when it has none; returns the archive's version.

    Raises:
        walog.errors.NewerFormatError: the archive is of a newer version than this walog
            writes (nothing was written).
        ValueError: its marker is damaged.
        OSError: the marker could not be read, written or synced.
    """
    marker = root / MARKER
    found = files.read_file(marker)
    if found is not None:
        return marker_format(root, found)
    # An archive written before the marker existed is version 1, as this one is.
    temporary = root / f"{MARKER}.tmp"
    files.write_file(temporary, marker_bytes())
    files.sync_file(temporary)
    files.rename(temporary, marker)
    files.sync_dir(root)
    return ARCHIVE_FORMAT


def publish(
    files: ArchiveFiles,
    root: PurePath,
    staging: PurePath,
    names: Iterable[str],
    mark: Callable[[], T],
    *,
    on_step: Callable[[str], None] | None = None,
) -> T:
    """Put the staged directories ``names`` in place under ``root`` durably, then ``mark``.

    ``staging`` holds a write this process finished, or one an earlier run sealed
    (:func:`staged_write_finished`). The module doc gives the order and why.

    Args:
        files: the file system.
        root: the archive root.
        staging: the run's staging directory (under ``root``).
        names: the directories to move, in order (``ledger=<id>``).
        mark: records the run as archived; called once everything is durable.
        on_step: told the name of each step as it starts (a progress bar).

    Returns:
        What ``mark`` returned.

    Raises:
        OSError: a file operation failed; nothing was marked.
    """
    step = on_step or (lambda _: None)
    unsynced = mutations.enabled("archive_marks_unsynced_output")
    if not unsynced and not files.exists(staging / SYNCED):
        step("syncing the written files")
        seal(files, staging)
    for name in names:
        step(f"moving {name}")
        move_ledger(files, staging, root, name)
    if not unsynced:
        step("syncing the archive root")
        files.sync_dir(root)
        files.sync_dir(root.parent)
    step("marking archived")
    return mark()


__all__ = [
    "SUCCESS",
    "SYNCED",
    "move_ledger",
    "publish",
    "publish_marker",
    "seal",
    "staged_write_finished",
    "sync_tree",
]

"""The archive's publish step: files, then their directories, then the renames, then the
root, and the mark only after all of it (walog/spark/archive_publish.py), over the real
local file system recorded by tests/archive_files.py."""

from __future__ import annotations

from pathlib import Path, PurePath

import pytest

from tests.archive_files import Call, RecordingFiles, durable_after, tree
from walog.log.archive_layout import ARCHIVE_FORMAT, MARKER, marker_bytes
from walog.mutations import enabled_mutations
from walog.spark.archive_files import LocalFiles, archive_root
from walog.spark.archive_publish import (
    SUCCESS,
    SYNCED,
    publish,
    publish_marker,
    staged_write_finished,
)

MARK = "mark"


def _spark_output(staging: Path, ledgers: dict[int, int]) -> list[str]:
    """What a finished Spark write leaves: ``ledger=<id>`` directories of part files (with
    their checksum files) and ``_SUCCESS``; returns the directory names."""
    for ledger_id, parts in ledgers.items():
        directory = staging / f"ledger={ledger_id}"
        directory.mkdir(parents=True)
        for part in range(parts):
            (directory / f"part-{part:05d}.parquet").write_bytes(b"PAR1" * (part + 1))
            (directory / f".part-{part:05d}.parquet.crc").write_bytes(b"crc")
    (staging / SUCCESS).touch()
    (staging / f".{SUCCESS}.crc").touch()
    return [f"ledger={i}" for i in ledgers]


def _publish(tmp_path: Path) -> tuple[Path, Path, RecordingFiles, list[str]]:
    root = tmp_path / "archive"
    staging = root / "_staging" / "intent"
    names = _spark_output(staging, {3: 2, 5: 1, 8: 3})
    files = RecordingFiles(LocalFiles())

    def mark() -> str:
        files.events.append(MARK)
        return "done"

    assert publish(files, root, staging, names, mark) == "done"
    return root, staging, files, names


def _at(events: list[object], name: str, *paths: PurePath) -> list[int]:
    """Indexes of the recorded calls ``name(*paths)``, oldest first."""
    found = [i for i, e in enumerate(events) if e == Call(name, tuple(paths))]
    assert found, f"{name}{paths} was never called"
    return found


def test_publish_syncs_files_then_their_directories_then_renames_then_the_root_then_marks(
    tmp_path: Path,
) -> None:
    root, staging, files, names = _publish(tmp_path)
    events = files.events
    mark = events.index(MARK)
    assert events.count(MARK) == 1 and mark == len(events) - 1
    (sealed,) = _at(events, "create_empty", staging / SYNCED)
    staged_synced, seal_synced = _at(events, "sync_dir", staging)
    assert staged_synced < sealed < seal_synced  # the seal's own entry, once everything is
    (root_synced,) = _at(events, "sync_dir", root)
    for name in names:
        published = root / name
        (moved,) = _at(events, "rename", staging / name, published)
        (directory,) = _at(events, "sync_dir", staging / name)
        for path in tree(LocalFiles(), published)[1:]:
            assert _at(events, "sync_file", staging / name / path.name)[0] < directory
        assert directory < staged_synced and seal_synced < moved < root_synced
    assert root_synced < _at(events, "sync_dir", root.parent)[-1] < mark


def test_publish_leaves_every_published_file_and_directory_durable_when_it_marks(
    tmp_path: Path,
) -> None:
    root, _staging, files, _names = _publish(tmp_path)
    before_mark = [e for e in files.events[: files.events.index(MARK)] if isinstance(e, Call)]
    published = tree(LocalFiles(), root, skip={"_staging"})
    assert len(published) == 1 + 3 + 2 * (2 + 1 + 3)
    assert set(published) - durable_after(before_mark) == set()


def test_the_archive_marker_is_durable_once_published_and_published_once(
    tmp_path: Path,
) -> None:
    root = tmp_path / "archive"
    LocalFiles().make_dirs(root)
    files = RecordingFiles(LocalFiles())
    assert publish_marker(files, root) == ARCHIVE_FORMAT
    assert {root / MARKER, root} <= durable_after(files.calls)
    assert [p.name for p in root.iterdir()] == [MARKER]  # its temporary name is gone
    assert (root / MARKER).read_bytes() == marker_bytes()
    again = RecordingFiles(LocalFiles())
    assert publish_marker(again, root) == ARCHIVE_FORMAT
    assert [c.name for c in again.calls] == ["read_file"]


def test_a_rerun_trusts_only_a_staging_directory_the_archive_sealed(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    _spark_output(staging, {1: 1})
    local = LocalFiles()
    assert not staged_write_finished(local, staging)  # Spark's _SUCCESS vouches for nothing
    root = tmp_path / "root"
    root.mkdir()
    files = RecordingFiles(local)
    publish(files, root, staging, [], lambda: None)
    assert staged_write_finished(local, staging)
    # Sealed by an earlier run: not synced again, published and marked.
    again = RecordingFiles(local)
    publish(again, root, staging, ["ledger=1"], lambda: None)
    assert not [c for c in again.calls if c.name == "sync_file"]
    assert (root / "ledger=1" / "part-00000.parquet").read_bytes() == b"PAR1"


def test_publish_replaces_leftovers_of_an_aborted_run_at_the_target(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    staging = root / "_staging" / "intent"
    names = _spark_output(staging, {4: 1})
    (root / "ledger=4").mkdir()
    (root / "ledger=4" / "part-99999.parquet").write_bytes(b"aborted")
    publish(LocalFiles(), root, staging, names, lambda: None)
    assert [p.name for p in (root / "ledger=4").iterdir() if p.suffix == ".parquet"] == [
        "part-00000.parquet"
    ]


def test_mutation_archive_marks_unsynced_output_marks_before_any_sync(tmp_path: Path) -> None:
    unsealed = tmp_path / "unsealed"
    _spark_output(unsealed, {1: 1})
    with enabled_mutations("archive_marks_unsynced_output"):
        root, staging, files, _names = _publish(tmp_path)
        trusted = staged_write_finished(LocalFiles(), unsealed)
    assert not [c for c in files.calls if c.name.startswith("sync")]
    assert not (staging / SYNCED).exists()
    assert (root / "ledger=3").is_dir()
    assert trusted  # Spark's _SUCCESS taken for a durable write


def test_local_files_create_missing_directories_and_list_them_sorted(tmp_path: Path) -> None:
    local = LocalFiles()
    deep = tmp_path / "a" / "b" / "c"
    local.make_dirs(deep)
    local.make_dirs(deep)  # already there: nothing to do
    (deep / "z").touch()
    (deep / "d").mkdir()
    assert [(e.name, e.is_dir) for e in local.list_dir(deep)] == [("d", True), ("z", False)]
    assert local.list_dir(tmp_path / "missing") == []
    local.remove_tree(tmp_path / "a")
    local.remove_tree(tmp_path / "a")  # already gone
    assert not local.exists(tmp_path / "a")


@pytest.mark.parametrize("uri", ["s3a://bucket/orders", "hdfs://nn:8020/archive", "file:///x"])
def test_archive_refuses_a_uri_as_its_directory(uri: str) -> None:
    with pytest.raises(ValueError, match="is a URI; walog archive writes to a directory path"):
        archive_root(uri)
    assert archive_root("relative/dir") == Path.cwd() / "relative" / "dir"

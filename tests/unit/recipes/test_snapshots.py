"""Snapshot bytes in a directory: durable files, checksums, corruption detected."""

from __future__ import annotations

from pathlib import Path

import pytest

from walog.log.position import Position
from walog.recipes.snapshots import CorruptSnapshotError, DirectorySnapshotStore, spool


def flip_byte(path: str, index: int) -> None:
    raw = bytearray(Path(path).read_bytes())
    raw[index] ^= 0x01
    Path(path).write_bytes(bytes(raw))


def exists(path: str) -> bool:
    return Path(path).exists()


def remove(path: str) -> None:
    Path(path).unlink()


async def test_a_directory_snapshot_reads_back_what_was_saved(tmp_path: Path) -> None:
    store = DirectorySnapshotStore(tmp_path / "snaps")
    with spool(iter([b"abc", b"def" * 300_000])) as data:
        info = await store.save(data, Position(1, 2, 3), "a")
    assert info.size_bytes == 3 + 900_000
    assert info.checksum.startswith("sha256:")
    assert info.path is not None and Path(info.path).parent == tmp_path / "snaps"
    assert not list((tmp_path / "snaps").glob(".*partial"))
    with await store.load(info) as back:
        assert back.read() == b"abc" + b"def" * 300_000
    await store.delete(info)
    assert not exists(info.path)


async def test_a_flipped_byte_makes_the_snapshot_corrupt(tmp_path: Path) -> None:
    store = DirectorySnapshotStore(tmp_path)
    with spool(b"state of the service") as data:
        info = await store.save(data, Position(1, 0, 0), "a")
    assert info.path is not None
    flip_byte(info.path, 3)
    with pytest.raises(CorruptSnapshotError, match="corrupt"):
        await store.load(info)


async def test_a_missing_snapshot_file_is_corrupt(tmp_path: Path) -> None:
    store = DirectorySnapshotStore(tmp_path)
    with spool(b"x") as data:
        info = await store.save(data, Position(1, 0, 0), "a")
    assert info.path is not None
    remove(info.path)
    with pytest.raises(CorruptSnapshotError, match="cannot open"):
        await store.load(info)


def test_a_snapshot_that_is_not_bytes_is_refused() -> None:
    with pytest.raises(TypeError, match="bytes or an iterable of bytes"):
        spool("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="chunks must be bytes"):
        spool(iter(["text"]))  # type: ignore[list-item]

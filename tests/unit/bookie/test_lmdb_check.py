"""The index file's structure check (bookie/storage/lmdb_check.py) on damage LMDB would
follow out of bounds; tests/fuzz/test_index_absence.py flips bytes at random."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.storage.journal_files import StorageIOError
from bookie.storage.lmdb_check import check_index_file
from tests.unit.bookie.helpers import add, open_core

_PAGE = 4096
_PSIZE_AT = 16 + 24  # page header, then magic, version, address, mapsize; then psize


async def test_a_meta_page_naming_another_page_size_refuses_start(tmp_path: Path) -> None:
    """LMDB maps the file by the page size of the meta page it picks: one damaged there
    made it read past the file (SIGBUS) while page 0 said 4096."""
    core = await open_core(tmp_path)
    for entry_id in range(3):
        await add(core, 1, entry_id)
    await core.close()
    index = tmp_path / "index" / "data.mdb"
    check_index_file(index)
    for page in (0, 1):
        data = bytearray(index.read_bytes())
        data[page * _PAGE + _PSIZE_AT + 1] ^= 0x50
        damaged = tmp_path / f"damaged-{page}.mdb"
        damaged.write_bytes(bytes(data))
        # Page 0 then names 16384: page 1 is looked for there, and is not a meta page.
        with pytest.raises(StorageIOError, match="page size" if page else "meta page 1"):
            check_index_file(damaged)

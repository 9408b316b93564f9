"""The checkpoint loop: what it refuses, and a store that is still usable after."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import pytest

import bookie.storage as storage_module
from bookie.journal_files import JournalMark
from bookie.ledgers import LedgerState
from bookie.storage import CachedEntry, EntryStorage
from walog.wire.digest import entry_digest

Entry = tuple[int, int, CachedEntry]


def entry(ledger_id: int, entry_id: int, data: bytes) -> Entry:
    """A valid entry (lac: the entry before it)."""
    lac = entry_id - 1
    return ledger_id, entry_id, (lac, entry_digest(ledger_id, entry_id, lac, data), data)


def state_of(ledger_id: int) -> bytes:
    return LedgerState(ledger_id, b"k" * 20).to_bytes()


BAD_ENTRIES = [
    pytest.param((1, 0, (-1, 0, "text")), TypeError, id="str payload"),
    pytest.param((1, 0, (-1, 0, 5)), TypeError, id="int payload"),
    pytest.param((1, 0, (-1, 0, None)), TypeError, id="None payload"),
    pytest.param((-1, 0, (-1, 0, b"x")), ValueError, id="negative ledger"),
    pytest.param((1, -1, (-1, 0, b"x")), ValueError, id="negative entry"),
    pytest.param((1 << 63, 0, (-1, 0, b"x")), ValueError, id="ledger 2**63"),
    pytest.param((1, 1 << 64, (-1, 0, b"x")), ValueError, id="entry 2**64"),
    pytest.param((1, 0, (1 << 63, 0, b"x")), ValueError, id="lac 2**63"),
    pytest.param((1, 0, (-(1 << 63) - 1, 0, b"x")), ValueError, id="lac below -2**63"),
    pytest.param((1, 0, (-1, -1, b"x")), ValueError, id="negative digest"),
    pytest.param((1, 0, (-1, 1 << 32, b"x")), ValueError, id="digest 2**32"),
    pytest.param(("1", 0, (-1, 0, b"x")), TypeError, id="str ledger"),
    pytest.param((1, 0.0, (-1, 0, b"x")), TypeError, id="float entry"),
    pytest.param((1, 0, (None, 0, b"x")), TypeError, id="None lac"),
    pytest.param((1, 0), ValueError, id="short entry"),
    pytest.param((1, 0, (-1, 0)), ValueError, id="short cached entry"),
    pytest.param(None, TypeError, id="None entry"),
]


@pytest.mark.parametrize(("bad", "error"), BAD_ENTRIES)
def test_a_bad_entry_fails_the_checkpoint_and_leaves_the_store_usable(
    bad: Any,
    error: type[Exception],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Chunks written before the bad entry, and one buffered when it comes.
    monkeypatch.setattr(storage_module, "_WRITE_CHUNK_BYTES", 250)
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    try:
        first = [entry(1, n, bytes([n]) * 100) for n in range(5)]
        storage.checkpoint(first[:2], {1: state_of(1)}, JournalMark(1, 0))
        with pytest.raises(error):
            storage.checkpoint([*first[2:], bad], {1: state_of(1)}, JournalMark(1, 1))
        assert storage.checkpoint_mark() == JournalMark(1, 0)
        # Nothing of the failed checkpoint is left buffered: the next one lands where
        # its index rows say.
        storage.checkpoint(first[2:], {1: state_of(1)}, JournalMark(1, 2))
        records, damaged = storage.read_run(1, 0, 4, 1 << 20)
        assert not damaged
        assert [(r.entry_id, r.data) for r in records] == [(e, d[2]) for _, e, d in first]
    finally:
        storage.close()


def test_a_payload_too_big_for_a_record_is_refused(tmp_path: Path) -> None:
    # A record's length is a u32. Both loops refuse before copying a byte, so a sparse
    # file mapped read-only stands in for the payload (no 4 GiB of memory or disk).
    size = (1 << 32) - 32  # one byte more than a record holds
    sparse = tmp_path / "sparse"
    with sparse.open("wb") as file:
        file.truncate(size)
    with sparse.open("rb") as file:
        mapping = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ)
    tmp_path = tmp_path / "store"
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    try:
        with memoryview(mapping) as data, pytest.raises(ValueError, match="a record holds"):
            storage.checkpoint([(1, 0, (-1, 0, data))], {1: state_of(1)}, JournalMark(1, 0))  # type: ignore[list-item]
    finally:
        storage.close()
        mapping.close()


def test_bytes_like_payloads_are_taken(tmp_path: Path) -> None:

    entries = [
        (3, n, (lac, entry_digest(3, n, lac, data), kind(data)))
        for n, lac, data, kind in ((0, -1, b"ab", bytearray), (1, 0, b"cd", memoryview))
    ]
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    try:
        storage.checkpoint(entries, {3: state_of(3)}, JournalMark(1, 0))  # type: ignore[arg-type]
        records, _ = storage.read_run(3, 0, 1, 1 << 20)
        assert [r.data for r in records] == [b"ab", b"cd"]
    finally:
        storage.close()

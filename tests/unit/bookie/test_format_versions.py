"""The bookie's formats on disk: a newer version stops the bookie with one error naming both
versions; older versions stay readable (docs/compatibility.md)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import crc32c
import lmdb
import pytest

from bookie.cookie import COOKIE_FORMAT, Cookie
from bookie.storage.config import StorageConfig
from bookie.storage.entry_log_writer import (
    BATCH,
    ENTRY_LOG_VERSION,
    LOG_HEADER,
    RECORD,
    entry_log_path,
    log_header,
)
from bookie.storage.entry_storage import EntryStorage
from bookie.storage.index import FORMAT_KEY, FORMAT_VERSION, seal
from bookie.storage.journal_files import (
    HEADER_BYTES,
    JournalMark,
    StorageIOError,
    journal_files,
    replay,
)
from bookie.storage.rebuild import rebuild_index
from tests.unit.bookie.helpers import add, open_core, payload, read_all
from walog.errors import CookieMismatchError
from walog.wire.digest import entry_digest
from walog.wire.status import Status

LEDGER = 7


def _both(found: int, known: int) -> str:
    return re.escape(f"has format version {found}; this walog reads up to {known}")


async def _stored(path: Path, entries: int = 3) -> None:
    core = await open_core(path)
    for entry_id in range(entries):
        status, _ = await add(core, LEDGER, entry_id)
        assert status is Status.OK
    await core.checkpoint()
    await core.close()


def _log_paths(path: Path) -> list[Path]:
    return sorted((path / "entrylogs").glob("*.log"))


async def test_a_newer_entry_log_version_is_refused_naming_both_versions(tmp_path: Path) -> None:
    await _stored(tmp_path)
    (log,) = _log_paths(tmp_path)
    raw = log.read_bytes()
    assert raw[: LOG_HEADER.size] == log_header(1), "an entry log starts with its header"
    head = LOG_HEADER.pack(b"WALE", ENTRY_LOG_VERSION + 1, 1, 0)[:-4]
    newer = head + crc32c.crc32c(head).to_bytes(4, "big")
    log.write_bytes(newer + raw[LOG_HEADER.size :])
    with pytest.raises(StorageIOError, match=_both(ENTRY_LOG_VERSION + 1, ENTRY_LOG_VERSION)):
        await open_core(tmp_path)


async def test_a_damaged_entry_log_header_is_not_taken_for_a_newer_version(
    tmp_path: Path,
) -> None:
    await _stored(tmp_path)
    (log,) = _log_paths(tmp_path)
    raw = bytearray(log.read_bytes())
    raw[4] ^= 0x40  # the version's top byte: 2**30 + 2, and a CRC that fails
    log.write_bytes(bytes(raw))
    core = await open_core(tmp_path)
    try:
        assert await read_all(core, LEDGER, 2) == {i: payload(LEDGER, i) for i in range(3)}
    finally:
        await core.close()


def _headerless_log(directory: Path, log_id: int, entries: int, head: bytes = b"") -> None:
    """An entry log as bookies wrote them before the header (format version 1), or with
    the header ``head`` (format 2: the same records)."""
    records = [head]
    for entry_id in range(entries):
        data = payload(LEDGER, entry_id)
        digest = entry_digest(LEDGER, entry_id, entry_id - 1, data)
        records.append(RECORD.pack(len(data), LEDGER, entry_id, entry_id - 1, digest) + data)
    directory.mkdir(parents=True, exist_ok=True)
    entry_log_path(directory, log_id).write_bytes(b"".join(records))


async def test_an_entry_log_of_one_record_per_entry_is_read_and_compacted_into_batches(
    tmp_path: Path,
) -> None:
    head = LOG_HEADER.pack(b"WALE", 2, 1, 0)[:-4]
    _headerless_log(tmp_path / "entrylogs", 1, 6, head + crc32c.crc32c(head).to_bytes(4, "big"))
    report = rebuild_index(StorageConfig(data_dir=tmp_path))
    assert (report.entries, report.skipped_bytes, report.unindexed_logs) == (6, 0, [])
    expected = {i: payload(LEDGER, i) for i in range(6)}
    core = await open_core(tmp_path)
    try:
        assert await read_all(core, LEDGER, 5) == expected
        moved = await core.in_storage(lambda storage: storage.compact_step(1, None, 1 << 20))
        assert moved == (None, sum(map(len, expected.values())))
        (log,) = _log_paths(tmp_path)
        assert log.read_bytes()[: LOG_HEADER.size] == log_header(int(log.stem))
        _, version, _, _ = LOG_HEADER.unpack_from(log.read_bytes())
        assert version == ENTRY_LOG_VERSION == 3
        assert await read_all(core, LEDGER, 5) == expected
    finally:
        await core.close()


async def test_an_entry_log_without_a_header_is_read_as_version_1(tmp_path: Path) -> None:
    _headerless_log(tmp_path / "entrylogs", 1, 4)
    report = rebuild_index(StorageConfig(data_dir=tmp_path))
    assert (report.entries, report.skipped_bytes, report.unindexed_logs) == (4, 0, [])
    core = await open_core(tmp_path)
    try:
        assert await read_all(core, LEDGER, 3) == {i: payload(LEDGER, i) for i in range(4)}
    finally:
        await core.close()


async def test_the_index_rebuild_starts_after_an_entry_logs_header(tmp_path: Path) -> None:
    await _stored(tmp_path, entries=5)
    (log,) = _log_paths(tmp_path)
    assert log.read_bytes()[: LOG_HEADER.size] == log_header(1)
    shutil.rmtree(tmp_path / "index")
    report = rebuild_index(StorageConfig(data_dir=tmp_path))
    assert (report.entries, report.skipped_bytes) == (5, 0)


async def test_a_newer_journal_file_version_is_refused_naming_both_versions(
    tmp_path: Path,
) -> None:
    core = await open_core(tmp_path)
    status, _ = await add(core, LEDGER, 0)
    assert status is Status.OK
    await core.close()
    journal = tmp_path / "journal"
    (_, path), *_ = journal_files(journal)
    raw = bytearray(path.read_bytes())
    assert raw[:4] == b"WALJ" and len(raw) >= HEADER_BYTES
    raw[4:8] = (3).to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    with pytest.raises(StorageIOError, match=_both(3, 2)):
        list(replay(journal, JournalMark(0, 0), 1 << 20))
    with pytest.raises(StorageIOError, match=_both(3, 2)):
        await open_core(tmp_path)


async def test_a_newer_index_version_is_refused_naming_both_versions(tmp_path: Path) -> None:
    await _stored(tmp_path)
    env = lmdb.open(str(tmp_path / "index"), max_dbs=4, map_size=1 << 30)
    try:
        meta = env.open_db(b"meta", create=False)
        newer = f"walog-bookie-index/{FORMAT_VERSION + 1}".encode()
        with env.begin(write=True) as txn:
            txn.put(FORMAT_KEY, seal(FORMAT_KEY, newer), db=meta)
    finally:
        env.close()
    with pytest.raises(StorageIOError, match=_both(FORMAT_VERSION + 1, FORMAT_VERSION)):
        await open_core(tmp_path)


_COOKIE = Cookie("0f8e", "127.0.0.1:3181", "/data/journal", "/data")


def test_a_newer_cookie_version_is_refused_naming_both_versions() -> None:
    doc = json.loads(_COOKIE.to_json())
    doc.update(format=COOKIE_FORMAT + 1, a_field_of_the_next_format="x")
    with pytest.raises(CookieMismatchError, match=_both(COOKIE_FORMAT + 1, COOKIE_FORMAT)):
        Cookie.from_json(json.dumps(doc).encode(), "the data directory")


def test_a_cookie_of_this_version_reads_back() -> None:
    assert Cookie.from_json(_COOKIE.to_json(), "here") == _COOKIE


async def test_the_index_rebuild_skips_a_batch_record_with_a_damaged_header_only(
    tmp_path: Path,
) -> None:
    """Batch records (format 3): a record whose header fails its CRC is skipped (its
    entries cannot be told apart from noise without their ledger); the scan finds the next
    record's header and indexes everything after it. (The rebuilt index's mark is the
    journal's start: the entries the journal still holds come back at the next start.)"""
    core = await open_core(tmp_path)
    for first in (0, 4, 8):  # three checkpoints: three records
        for entry_id in range(first, first + 4):
            status, _ = await add(core, LEDGER, entry_id)
            assert status is Status.OK
        await core.checkpoint()
    await core.close()
    (log,) = _log_paths(tmp_path)
    raw = bytearray(log.read_bytes())
    body, _, count, _ = BATCH.unpack_from(raw, LOG_HEADER.size)
    second = LOG_HEADER.size + BATCH.size + body
    assert count == 4 and BATCH.unpack_from(raw, second)[2] == 4
    raw[second + 9] ^= 0x01  # the second record's ledger id
    log.write_bytes(bytes(raw))
    shutil.rmtree(tmp_path / "index")
    report = rebuild_index(StorageConfig(data_dir=tmp_path))
    assert report.entries == 8 and report.skipped_bytes > 4 * len(payload(LEDGER, 4))
    storage = EntryStorage(tmp_path, entry_log_file_bytes=1 << 20)
    try:
        assert storage.entries_in(LEDGER, 0, 20) == {*range(4), *range(8, 12)}
    finally:
        storage.close()

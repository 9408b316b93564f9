"""Journal replay runs compiled (bookie/storage/_fastreplay.c) on a bookie's own disks and in
pure Python elsewhere (``WALOG_PURE_PYTHON=1``, the simulator's disks): after the same
journal both leave the same store, entry for entry, fence for fence, LAC for LAC, and cut
the same torn tails.

The compiled module must be built here (``pip install -e .``): these tests fail, not skip,
when it is not; they run it under ``WALOG_PURE_PYTHON=1`` too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import crc32c
import pytest

import bookie.storage.journal_files as journal_files_module
import bookie.storage.replay as replay_module
from bookie.storage.journal_files import (
    FRAME,
    crc_seed,
    file_header,
    journal_file,
    journal_files,
)
from bookie.storage.journal_records import (
    add_header,
    delete_record,
    fence_record,
    key_record,
    lac_record,
)
from bookie.storage.replay import LoadedStore, load_store
from tests.unit.bookie.helpers import (
    KEY,
    OTHER_KEY,
    add,
    compiled_replay_module,
    config,
    open_core,
    payload,
)
from walog.wire.digest import entry_digest
from walog.wire.durability import Durability
from walog.wire.packing import ENTRY_HEADER

VOLATILE_LEDGER = 4


def _entry(ledger_id: int, entry_id: int, lac: int, data: bytes, *, good: bool = True) -> bytes:
    digest = entry_digest(ledger_id, entry_id, lac, data) ^ (0 if good else 1)
    return ENTRY_HEADER.pack(entry_id, lac, digest, len(data)) + data


def _adds(ledger_id: int, ids: list[int], *, volatile: bool = False, size: int = 40) -> bytes:
    entries = b"".join(_entry(ledger_id, e, e - 1, payload(ledger_id, e, size)) for e in ids)
    return add_header(ledger_id, volatile) + entries


def _framed(file_seq: int, payloads: list[bytes]) -> bytes:
    seed = crc_seed(file_seq)
    return b"".join(FRAME.pack(len(p), crc32c.crc32c(p, seed)) + p for p in payloads)


def _records() -> list[bytes]:
    """Records of every kind and shape replay meets, well formed or not, on top of what the
    engine journaled (ledgers 1 to 4, ledger 1 checkpointed up to entry 19)."""
    new, old = 100, 1
    return [
        key_record(new, KEY),
        _adds(new, list(range(10))),
        _adds(new, [12, 11, 15], volatile=True),  # out of order, with a gap
        add_header(new, False) + _entry(new, 3, 2, b"another copy"),  # the first copy stays
        add_header(new, False)
        + _entry(new, 16, 15, b"good")
        + _entry(new, 17, 16, b"bad digest", good=False)
        + _entry(new, 18, 17, b"good too"),
        _adds(new, [19, 20]) + b"stray",  # a malformed tail: the entries before it count
        _adds(new, [21]) + ENTRY_HEADER.pack(22, 21, 0, 1 << 20) + b"short",
        _adds(new, [23, 24], size=3000),  # larger than a small read chunk
        _adds(new, []),
        lac_record(new, 40),
        lac_record(new, 5),  # a LAC never goes back
        key_record(new, OTHER_KEY),  # the first key stays
        _adds(old, [5, 18, 19, 20, 21, 40]),  # 5..19 are in the index already
        add_header(old, False) + _entry(old, -3, -4, b"negative"),
        fence_record(2),
        _adds(999, [0, 1]),  # no key: an unknown ledger
        delete_record(3),
        key_record(3, KEY),
        fence_record(3),
        _adds(3, [0, 1, 2]),  # a recovery write after the deletion
        _adds(VOLATILE_LEDGER, [30, 31], volatile=True),
        bytes([9]) + bytes(8),  # an unknown kind: skipped
        bytes([1, 0, 0]),  # a truncated ADD: skipped
        delete_record(5),  # a ledger never seen
    ]


async def _journal(path: Path) -> None:
    """A store whose journal holds what the engine wrote (some of it checkpointed) and
    then files of crafted records, each file ending in a different kind of torn tail."""
    core = await open_core(path)
    for entry_id in range(20):
        for ledger_id in (1, 2, 3):
            await add(core, ledger_id, entry_id)
    await core.checkpoint()
    for entry_id in range(20, 30):
        for ledger_id in (1, 2):
            await add(core, ledger_id, entry_id)
    for entry_id in range(10):
        await add(core, VOLATILE_LEDGER, entry_id, durability=Durability.VOLATILE)
    await core.fence(1, KEY)
    core.update_lac(2, 25, KEY)
    await core.force(2, KEY)
    await core.abandon()
    journal_dir = path / "journal"
    seq = journal_files(journal_dir)[-1][0]
    records = _records()
    torn = records[1]
    tails = [
        # a record whose CRC fails, and good records after it: all cut
        FRAME.pack(len(torn), crc32c.crc32c(torn, crc_seed(seq + 1)) ^ 1)
        + torn
        + _framed(seq + 1, records[:3]),
        FRAME.pack(500, 0) + b"only part of it",  # a short record
        b"\x00\x00\x01",  # a short frame header
    ]
    for n, tail in enumerate(tails, start=1):
        half = records[: len(records) // 2] if n == 1 else records[len(records) // 2 :]
        body = _framed(seq + n, half if n < 3 else [fence_record(100)])
        journal_file(journal_dir, seq + n).write_bytes(file_header(seq + n) + body + tail)


def _contents(loaded: LoadedStore, journal_dir: Path) -> dict[str, object]:
    """What replay left: every ledger's state, every cached entry, the bookkeeping, the
    journal files as cut."""
    return {
        "states": {n: state.to_bytes() for n, state in sorted(loaded.states.items())},
        "cache": loaded.cache.snapshot(),
        "cache_bytes": loaded.cache.bytes,
        "cache_count": loaded.cache.count,
        "touched": loaded.touched,
        "deleted": loaded.deleted,
        "tombstones": loaded.tombstones.runs,
        "damaged": loaded.damaged,
        "next_journal_seq": loaded.next_journal_seq,
        "replayed_records": loaded.replayed_records,
        "replayed_bytes": loaded.replayed_bytes,
        "journal": {p.name: p.read_bytes() for _, p in journal_files(journal_dir)},
    }


def _load(path: Path) -> tuple[dict[str, object], bool]:
    loaded = load_store(config(path))
    try:
        return _contents(loaded, path / "journal"), loaded.compiled
    finally:
        loaded.storage.close()


@pytest.mark.parametrize("chunk_bytes", [64, 1000, 16 * 1024 * 1024])
async def test_compiled_and_pure_python_replay_leave_the_same_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    fast = compiled_replay_module()
    await _journal(tmp_path / "written")
    shutil.copytree(tmp_path / "written", tmp_path / "compiled")
    shutil.copytree(tmp_path / "written", tmp_path / "pure")
    monkeypatch.setattr(journal_files_module, "_SCAN_CHUNK", chunk_bytes)
    monkeypatch.setattr(replay_module, "_fastreplay", fast)  # WALOG_PURE_PYTHON=1 too
    compiled, ran_compiled = _load(tmp_path / "compiled")
    monkeypatch.setattr(replay_module, "_fastreplay", None)
    pure, ran_pure = _load(tmp_path / "pure")
    assert (ran_compiled, ran_pure) == (True, False)
    for name, value in pure.items():
        assert compiled[name] == value, name
    # The journal exercised what it was made for.
    cache = pure["cache"]
    assert isinstance(cache, dict)
    assert sorted(cache[100]) == [*range(10), 11, 12, 15, 16, 18, 19, 20, 21, 23, 24]
    assert cache[100][3][2] == payload(100, 3, 40)
    assert sorted(cache[1]) == [-3, *range(20, 30), 40]
    assert sorted(cache[3]) == [0, 1, 2]
    assert 999 not in cache

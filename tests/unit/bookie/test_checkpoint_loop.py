"""The checkpoint loop, compiled (bookie/storage/_fastcheckpoint.c) and pure Python: the same entry
logs, index rows, live-byte counts, flush points and errors for the same entries.

The compiled loop must be built here (``pip install -e .``): these tests fail, not skip,
when it is not. The other storage tests run with whichever loop is selected
(``WALOG_PURE_PYTHON=1`` picks the pure-Python one); ./test runs them both ways.
"""

from __future__ import annotations

import mmap
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bookie.storage.entry_log_writer as writer_module
from bookie.storage.entry_storage import CachedEntry, EntryStorage
from bookie.storage.index import MAX_RUN_ENTRIES, run_row, unseal_run_row
from bookie.storage.journal_files import JournalMark
from bookie.storage.ledger_state import LedgerState
from tests.unit.bookie.helpers import compiled_checkpoint_module
from walog.wire.digest import entry_digest

Entry = tuple[int, int, CachedEntry]
LOOPS = ("python", "compiled")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def select(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``select(loop)``: run checkpoints with the named loop from now on."""
    compiled_checkpoint_module()

    def choose(loop: str) -> None:
        monkeypatch.setattr(writer_module, "_COMPILED", loop == "compiled")

    yield choose


def random_entries(rng: random.Random, *, ledgers: int, entries: int) -> list[Entry]:
    """Entries by ledger then entry id (as the write cache hands them over), with payloads
    of 0 to a few KiB, empty ones among them, and gaps in the ids now and then."""
    ledger_ids = sorted(rng.sample([*range(1, 50), (1 << 63) - 1, 1 << 40], ledgers))
    out: list[Entry] = []
    for ledger_id in ledger_ids:
        first = rng.choice([0, 0, 7, (1 << 63) - 2 * entries - 1])
        ids = range(first, first + 2 * rng.randint(1, entries))
        gaps = rng.choice([0.0, 0.0, 0.05, 0.5])
        for entry_id in (i for i in ids if rng.random() >= gaps):
            size = rng.choice([0, 0, 1, 31, 32, 33, rng.randint(0, 300), rng.randint(0, 5000)])
            data = rng.randbytes(size)
            out.append(entry(ledger_id, entry_id, data))
            if rng.random() < 0.2:  # any lac and digest are stored as they are
                lac, digest = rng.choice([-(1 << 63), (1 << 63) - 1]), rng.choice([0, 1 << 31])
                out[-1] = (ledger_id, entry_id, (lac, digest, data))
    return out


def entry(ledger_id: int, entry_id: int, data: bytes) -> Entry:
    """A valid entry (lac: the entry before it)."""
    lac = entry_id - 1
    return ledger_id, entry_id, (lac, entry_digest(ledger_id, entry_id, lac, data), data)


def state_of(ledger_id: int) -> bytes:
    return LedgerState(ledger_id, b"k" * 20).to_bytes()


def dump(storage: EntryStorage) -> dict[str, Any]:
    """Everything a store holds: entry-log files and every row of every index table."""
    tables: dict[str, list[tuple[bytes, bytes]]] = {}
    with storage._env.begin() as txn:
        for name, db in (
            ("entries", storage._entries),
            ("ledgers", storage._ledgers),
            ("logs", storage._logs),
            ("meta", storage._meta),
        ):
            tables[name] = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    logs = {p.name: p.read_bytes() for p in sorted(storage.log_dir.glob("*.log"))}
    return {"tables": tables, "logs": logs}


def run_checkpoints(
    path: Path,
    batches: list[list[Entry]],
    *,
    log_bytes: int,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[dict[str, Any], list[str]]:
    """Checkpoint ``batches`` into a new store; its contents and the syscalls that wrote
    and synced its entry logs (in order)."""
    calls: list[str] = []
    write, fdatasync, fsync = os.write, os.fdatasync, os.fsync

    def counted_write(fd: int, data: Any) -> int:
        calls.append(f"write {len(data)}")
        return write(fd, data)

    def counted_fdatasync(fd: int) -> None:
        calls.append("fdatasync")
        fdatasync(fd)

    def counted_fsync(fd: int) -> None:
        calls.append("fsync")
        fsync(fd)

    storage = EntryStorage(path, entry_log_file_bytes=log_bytes)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(os, "write", counted_write)
            patch.setattr(os, "fdatasync", counted_fdatasync)
            patch.setattr(os, "fsync", counted_fsync)
            for number, batch in enumerate(batches):
                states = {ledger_id: state_of(ledger_id) for ledger_id, _, _ in batch}
                written = storage.checkpoint(batch, states, JournalMark(1, number))
                assert written == len(batch)
        return dump(storage), calls
    finally:
        storage.close()


@pytest.mark.parametrize("seed", range(12))
def test_both_loops_write_the_same_logs_and_index(
    seed: int, tmp_path: Path, select: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    # Small logs and chunks: rolls and chunk flushes every few entries, and entries that
    # fill a chunk or a log exactly or overshoot it.
    log_bytes = rng.choice([1, 200, 4096, 64 << 10, 1 << 30])
    monkeypatch.setattr(writer_module, "_WRITE_CHUNK_BYTES", rng.choice([1, 100, 3000, 1 << 20]))
    batches = [
        random_entries(rng, ledgers=rng.randint(1, 6), entries=rng.randint(1, 40))
        for _ in range(rng.randint(1, 4))
    ]
    batches.append([])  # a checkpoint with no entries
    results = {}
    for loop in LOOPS:
        select(loop)
        results[loop] = run_checkpoints(
            tmp_path / loop, batches, log_bytes=log_bytes, monkeypatch=monkeypatch
        )
    (python_dump, python_calls), (compiled_dump, compiled_calls) = (
        results["python"],
        results["compiled"],
    )
    assert python_dump["logs"].keys() == compiled_dump["logs"].keys()
    for name, raw in python_dump["logs"].items():
        assert raw == compiled_dump["logs"][name], f"entry log {name} differs"
    for table, rows in python_dump["tables"].items():
        assert rows == compiled_dump["tables"][table], f"index table {table} differs"
    # The same chunks written and synced at the same points.
    assert python_calls == compiled_calls


@pytest.mark.parametrize("seed", range(6))
def test_both_loops_build_the_same_rows_and_live_counts(
    seed: int, tmp_path: Path, select: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(100 + seed)
    monkeypatch.setattr(writer_module, "_WRITE_CHUNK_BYTES", rng.choice([1, 500, 1 << 20]))
    entries = random_entries(rng, ledgers=rng.randint(1, 8), entries=60)
    log_bytes = rng.choice([300, 10_000])
    built = {}
    for loop in LOOPS:
        storage = EntryStorage(tmp_path / loop, entry_log_file_bytes=log_bytes)
        try:
            rows: dict[int, list[tuple[bytes, bytes]]] = {}
            live: dict[int, dict[int, int]] = {}
            writer = storage._log_writer
            append = writer._append_compiled if loop == "compiled" else writer._append_python
            assert append(iter(entries), rows, live) == len(entries)
            # Order too: it decides the order of the live-bytes documents' keys.
            built[loop] = (
                [(ledger, list(bucket)) for ledger, bucket in rows.items()],
                [(log, list(counts.items())) for log, counts in live.items()],
            )
        finally:
            storage.close()
    assert built["python"] == built["compiled"]
    # And the rows are run_row's, one per run of consecutive entries, holding every entry
    # once and nothing else.
    rows_by_ledger = dict(built["compiled"][0])
    for ledger_id, bucket in rows_by_ledger.items():
        held: list[int] = []
        for key, value in bucket:
            run = unseal_run_row(key, value)
            assert run is not None
            assert 1 <= len(run.lengths) <= MAX_RUN_ENTRIES
            assert (key, value) == run_row(ledger_id, *run)
            held.extend(range(run.first, run.last + 1))
        assert held == [e for led, e, _ in entries if led == ledger_id]


def test_consecutive_entries_share_one_run_row_until_it_is_full(
    tmp_path: Path, select: Any
) -> None:
    """One row per run of consecutive entries: a gap, another ledger or a full run starts
    a new one (chunks of 1 MiB and logs of 10 MB never cut these)."""
    entries = [entry(1, i, b"x" * 10) for i in [*range(600), *range(601, 603)]]
    entries += [entry(2, i, b"y") for i in range(3)]
    for loop in LOOPS:
        select(loop)
        storage = EntryStorage(tmp_path / loop, entry_log_file_bytes=10_000_000)
        try:
            rows: dict[int, list[tuple[bytes, bytes]]] = {}
            storage._log_writer.write(iter(entries), rows, {})
            runs = {
                ledger: [
                    (r.first, r.last) for r in map(lambda kv: unseal_run_row(*kv), bucket) if r
                ]
                for ledger, bucket in rows.items()
            }
            assert runs == {
                1: [
                    (0, MAX_RUN_ENTRIES - 1),
                    (MAX_RUN_ENTRIES, 2 * MAX_RUN_ENTRIES - 1),
                    (2 * MAX_RUN_ENTRIES, 599),
                    (601, 602),
                ],
                2: [(0, 2)],
            }, loop
        finally:
            storage.close()


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


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(("bad", "error"), BAD_ENTRIES)
def test_a_bad_entry_fails_the_checkpoint_with_the_same_error_and_leaves_the_store_usable(
    loop: str,
    bad: Any,
    error: type[Exception],
    tmp_path: Path,
    select: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    select(loop)
    # Chunks written before the bad entry, and one buffered when it comes.
    monkeypatch.setattr(writer_module, "_WRITE_CHUNK_BYTES", 250)
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


@pytest.mark.parametrize("loop", LOOPS)
def test_a_payload_too_big_for_a_record_is_refused(loop: str, tmp_path: Path, select: Any) -> None:
    select(loop)
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


@pytest.mark.parametrize("loop", LOOPS)
def test_bytes_like_payloads_are_taken_by_both_loops(
    loop: str, tmp_path: Path, select: Any
) -> None:
    select(loop)

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

"""Damaged files: open never crashes, never serves a corrupt entry, and keeps every
acknowledged entry whose bytes lie before the damage (journal) or outside it (entry logs)."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie.storage.entry_log_writer import BATCH, LOG_HEADER, records_start
from bookie.storage.entry_storage import EntryStorage
from bookie.storage.journal_files import HEADER_BYTES, journal_files
from bookie.storage.journal_records import RecordKind, decode_record
from tests.unit.bookie.helpers import add, open_core, payload
from walog.wire.durability import Durability
from walog.wire.packing import ENTRY_HEADER, unpack_entries
from walog.wire.status import Status

_FRAME = struct.Struct(">II")
SIZE = 200
ENTRIES = 25
LEDGERS = (1, 2, 3)


@dataclass(frozen=True)
class Span:
    """Where one entry's bytes are in one file."""

    ledger_id: int
    entry_id: int
    start: int
    end: int


@dataclass
class Pristine:
    """An undamaged store: ledger 1 in entry logs, ledgers 2 and 3 only in the journal."""

    path: Path
    spans: dict[Path, list[Span]]  # relative path -> spans
    mark_offset: dict[Path, int]  # journal file -> offset replay starts at


async def _build(path: Path) -> None:
    core = await open_core(path, entry_log_file_bytes=2048)
    for entry_id in range(ENTRIES):
        await add(core, 1, entry_id, data=payload(1, entry_id, SIZE))
    await core.checkpoint()
    for entry_id in range(ENTRIES):
        await add(core, 2, entry_id, data=payload(2, entry_id, SIZE))
        await add(
            core, 3, entry_id, data=payload(3, entry_id, SIZE), durability=Durability.VOLATILE
        )
    await core.abandon()


def _journal_spans(path: Path, start: int) -> list[Span]:
    raw = path.read_bytes()
    spans = []
    offset = start
    while offset + _FRAME.size <= len(raw):
        length, _ = _FRAME.unpack_from(raw, offset)
        if length == 0:
            break  # the file's reserved space, never written
        end = offset + _FRAME.size + length
        record = decode_record(raw[offset + _FRAME.size : end])
        if record.kind is RecordKind.ADD:
            # One add at a time here: each record holds one entry.
            ((entry_id, *_),), _ = unpack_entries(record.data)
            spans.append(Span(record.ledger_id, entry_id, offset, end))
        offset = end
    return spans


def _entry_log_spans(path: Path) -> list[Span]:
    raw = path.read_bytes()
    spans = []
    offset = records_start(raw[: LOG_HEADER.size], path)
    while offset < len(raw):  # batch records (format 3)
        _, ledger_id, count, _ = BATCH.unpack_from(raw, offset)
        offset += BATCH.size
        for _ in range(count):
            entry_id, _, _, length = ENTRY_HEADER.unpack_from(raw, offset)
            end = offset + ENTRY_HEADER.size + length
            spans.append(Span(ledger_id, entry_id, offset, end))
            offset = end
    return spans


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    path = tmp_path_factory.mktemp("pristine")
    asyncio.run(_build(path))
    storage = EntryStorage(path, entry_log_file_bytes=2048)
    mark = storage.checkpoint_mark()
    storage.close()
    spans: dict[Path, list[Span]] = {}
    marks: dict[Path, int] = {}
    for seq, file in journal_files(path / "journal"):
        if seq >= mark.file_seq:
            start = max(HEADER_BYTES, mark.offset if seq == mark.file_seq else 0)
            spans[file.relative_to(path)] = _journal_spans(file, start)
            marks[file.relative_to(path)] = start
            # Release the space reserved past the records (replay cuts it anyway): each
            # example copies the store, and damage is aimed at what was written.
            os.truncate(file, max([start, *(s.end for s in spans[file.relative_to(path)])]))
    for file in sorted((path / "entrylogs").glob("*.log")):
        spans[file.relative_to(path)] = _entry_log_spans(file)
    assert sum(len(s) for s in spans.values()) == ENTRIES * len(LEDGERS)
    return Pristine(path, spans, marks)


def _kept_after(
    pristine: Pristine, target: Path, offset: int, truncate: bool
) -> set[tuple[int, int]]:
    """Entries that must survive damage at ``offset`` of ``target``."""
    kept: set[tuple[int, int]] = set()
    journal = target in pristine.mark_offset
    for file, spans in pristine.spans.items():
        for span in spans:
            if file != target:
                ok = True
            elif journal or truncate:
                ok = span.end <= offset  # journal: everything from the damage on may be cut
            else:
                ok = not span.start <= offset < span.end
            if ok:
                kept.add((span.ledger_id, span.entry_id))
    return kept


async def _served(path: Path) -> dict[tuple[int, int], bytes]:
    core = await open_core(path)
    served: dict[tuple[int, int], bytes] = {}
    try:
        for ledger_id in core.ledgers():
            for entry_id in range(ENTRIES + 2):
                status, records = await core.read(ledger_id, entry_id, entry_id)
                assert status in (Status.OK, Status.NO_SUCH_ENTRY, Status.IO_ERROR)
                for record in records:
                    served[(ledger_id, record.entry_id)] = record.data
            status, records = await core.read(ledger_id, 0, ENTRIES)
            for record in records:
                assert record.data == payload(ledger_id, record.entry_id, SIZE)
    finally:
        await core.close()
    return served


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damage_never_crashes_open_nor_serves_corrupt_entries_and_keeps_intact_ones(
    pristine: Pristine, data: st.DataObject
) -> None:
    target = data.draw(st.sampled_from(sorted(pristine.spans)), label="file")
    size = (pristine.path / target).stat().st_size
    low = pristine.mark_offset.get(target, 0)
    offset = data.draw(st.integers(min_value=max(0, low - 8), max_value=size - 1), label="offset")
    truncate = data.draw(st.booleans(), label="truncate")
    flips = data.draw(st.lists(st.integers(1, 255), min_size=1, max_size=3), label="xor")
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(pristine.path, copy)
        victim = copy / target
        if truncate:
            with open(victim, "r+b") as handle:
                handle.truncate(offset)
        else:
            raw = bytearray(victim.read_bytes())
            for index, xor in enumerate(flips):
                if offset + index < len(raw):
                    raw[offset + index] ^= xor
            victim.write_bytes(bytes(raw))
        served = asyncio.run(_served(copy))
    for (ledger_id, entry_id), value in served.items():
        assert value == payload(ledger_id, entry_id, SIZE), "a corrupt entry was served"
    # A multi-byte flip spans up to 3 bytes: widen the damaged zone accordingly.
    kept = _kept_after(pristine, target, offset, truncate)
    if not truncate:
        kept &= _kept_after(pristine, target, offset + len(flips) - 1, truncate)
    missing = kept - set(served)
    assert not missing, f"intact entries lost: {sorted(missing)}"

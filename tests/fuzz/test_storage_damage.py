"""Storage replay against damaged files, beyond the single-site cases of
``tests/unit/bookie/test_damage.py`` (whose store, spans and survival rules are reused):

- damage in two files at once (journal and entry log, or two entry logs): opening never
  crashes, no corrupt entry is served, and every entry intact under both damages is kept;
- bit flips in the LMDB index: opening either refuses with a clear ``StorageIOError`` or
  serves no corrupt entry and never forgets a fence (nor the ledger's master key).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie.journal import StorageIOError
from tests.unit.bookie.helpers import KEY, OTHER_KEY, add, open_core, payload
from tests.unit.bookie.test_damage import SIZE, Pristine, _kept_after, _served, pristine
from walog.transport.base import Status

__all__ = ["pristine"]  # the fixture of test_damage, shared here

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
MANY = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


def _damage(victim: Path, offset: int, truncate: bool, flips: list[int]) -> None:
    if truncate:
        with open(victim, "r+b") as handle:
            handle.truncate(offset)
        return
    raw = bytearray(victim.read_bytes())
    for index, xor in enumerate(flips):
        if offset + index < len(raw):
            raw[offset + index] ^= xor
    victim.write_bytes(bytes(raw))


def _site(data: st.DataObject, pristine: Pristine, target: Path) -> tuple[int, bool, list[int]]:
    size = (pristine.path / target).stat().st_size
    low = pristine.mark_offset.get(target, 0)
    offset = data.draw(st.integers(max(0, low - 8), size - 1), label=f"offset in {target}")
    truncate = data.draw(st.booleans(), label="truncate")
    flips = data.draw(st.lists(st.integers(1, 255), min_size=1, max_size=3), label="xor")
    return offset, truncate, flips


def _two_sites(pristine: Pristine, data: st.DataObject) -> None:
    files = sorted(pristine.spans)
    first, second = data.draw(
        st.lists(st.sampled_from(files), min_size=2, max_size=2, unique=True), label="files"
    )
    sites = {first: _site(data, pristine, first), second: _site(data, pristine, second)}
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(pristine.path, copy)
        for target, (offset, truncate, flips) in sites.items():
            _damage(copy / target, offset, truncate, flips)
        served = asyncio.run(_served(copy))
    for (ledger_id, entry_id), value in served.items():
        assert value == payload(ledger_id, entry_id, SIZE), "a corrupt entry was served"
    kept: set[tuple[int, int]] | None = None
    for target, (offset, truncate, flips) in sites.items():
        here = _kept_after(pristine, target, offset, truncate)
        if not truncate:
            here &= _kept_after(pristine, target, offset + len(flips) - 1, truncate)
        kept = here if kept is None else kept & here
    assert kept is not None
    missing = kept - set(served)
    assert not missing, f"intact entries lost: {sorted(missing)}"


@FAST
@given(data=st.data())
def test_damage_in_two_files_keeps_every_entry_intact_under_both(
    pristine: Pristine, data: st.DataObject
) -> None:
    _two_sites(pristine, data)


@pytest.mark.slow
@MANY
@given(data=st.data())
def test_damage_in_two_files_many(pristine: Pristine, data: st.DataObject) -> None:
    _two_sites(pristine, data)


# -- the index ---------------------------------------------------------------------------

FENCED = 2
STORED = 1
ENTRIES = 30


async def _build_with_fence(path: Path) -> None:
    core = await open_core(path)
    for entry_id in range(ENTRIES):
        await add(core, STORED, entry_id, data=payload(STORED, entry_id, SIZE))
    await add(core, FENCED, 0, data=payload(FENCED, 0, SIZE))
    status, _, _ = await core.fence(FENCED, KEY)
    assert status is Status.OK
    await core.checkpoint()  # entries and ledger state now live in entry logs + index
    await core.abandon()


@pytest.fixture(scope="module")
def indexed_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("indexed")
    asyncio.run(_build_with_fence(path))
    yield path


async def _after_index_damage(path: Path) -> None:
    try:
        core = await open_core(path)
    except StorageIOError as exc:
        # Refusing to start on an index it cannot read is safe; it must say so clearly.
        assert "cannot open index" in str(exc) or "cannot load the store" in str(exc), exc
        return
    try:
        for entry_id in range(ENTRIES + 1):
            status, records = await core.read(STORED, entry_id, entry_id)
            assert status in (
                Status.OK,
                Status.NO_SUCH_ENTRY,
                Status.NO_SUCH_LEDGER,
                Status.IO_ERROR,
            )
            for record in records:
                assert record.data == payload(STORED, record.entry_id, SIZE), "corrupt entry"
        assert core.is_fenced(FENCED), "a fenced ledger was forgotten"
        refused, _ = await add(core, FENCED, 1, data=payload(FENCED, 1, SIZE))
        assert refused is not Status.OK, "a plain add to a fenced ledger was accepted"
        wrong, _ = await add(core, STORED, ENTRIES, key=OTHER_KEY)
        assert wrong is not Status.OK, "an add with a wrong master key was accepted"
    finally:
        await core.close()


def _index_damage(store: Path, data: st.DataObject) -> None:
    index = sorted((store / "index").glob("data.mdb"))
    assert index, "the store has no LMDB index file"
    size = index[0].stat().st_size
    offset = data.draw(st.integers(0, size - 1), label="offset in data.mdb")
    flips = data.draw(st.lists(st.integers(1, 255), min_size=1, max_size=4), label="xor")
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(store, copy)
        _damage(copy / "index" / "data.mdb", offset, False, flips)
        asyncio.run(_after_index_damage(copy))


@FAST
@given(data=st.data())
def test_index_bit_flips_never_serve_corrupt_entries_nor_forget_fences(
    indexed_store: Path, data: st.DataObject
) -> None:
    _index_damage(indexed_store, data)


@pytest.mark.slow
@MANY
@given(data=st.data())
def test_index_bit_flips_many(indexed_store: Path, data: st.DataObject) -> None:
    _index_damage(indexed_store, data)

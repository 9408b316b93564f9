"""Storage replay against damaged files, beyond the single-site cases of
``tests/unit/bookie/test_damage.py`` (whose store, spans and survival rules are reused):

damage in two files at once (journal and entry log, or two entry logs): opening never
crashes, no corrupt entry is served, and every entry intact under both damages is kept.

Byte flips in the LMDB index are the subject of ``test_index_absence.py``.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.bookie.helpers import payload
from tests.unit.bookie.test_damage import SIZE, Pristine, _kept_after, _served, pristine

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


def _entry_log_bit_flips(pristine: Pristine, count: int) -> None:
    """``count`` single-bit flips (seeds 0..count-1) in the entry logs, one store copy each:
    never a crash, never a wrong entry served, every entry outside the flipped one kept."""
    logs = sorted(target for target in pristine.spans if target.parts[0] == "entrylogs")
    for seed in range(count):
        rng = random.Random(seed)
        target = rng.choice(logs)
        offset = rng.randrange((pristine.path / target).stat().st_size)
        bit = 1 << rng.randrange(8)
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "store"
            shutil.copytree(pristine.path, copy)
            _damage(copy / target, offset, False, [bit])
            served = asyncio.run(_served(copy))
        for (ledger_id, entry_id), value in served.items():
            assert value == payload(ledger_id, entry_id, SIZE), (
                f"seed {seed}: a corrupt entry was served ({target} byte {offset} ^= {bit})"
            )
        missing = _kept_after(pristine, target, offset, False) - set(served)
        assert not missing, f"seed {seed}: intact entries lost: {sorted(missing)}"


def test_entry_log_bit_flips_are_caught_never_served(pristine: Pristine) -> None:
    _entry_log_bit_flips(pristine, 100)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_entry_log_bit_flips_are_caught_never_served_many(pristine: Pristine) -> None:
    _entry_log_bit_flips(pristine, 2000)

"""The compiled checkpoint loop's module (bookie/storage/_fastcheckpoint.c) on its own: its CRC32C
and its refusal of bad arguments. tests/unit/bookie/test_checkpoint_loop.py checks that
checkpoints through it store what the pure-Python loop stores.

The module must be built here (``pip install -e .``): these tests fail, not skip, when it
is not.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import crc32c
import pytest

from tests.unit.bookie.helpers import compiled_checkpoint_module

Entry = tuple[int, int, tuple[int, int, bytes]]


def test_the_compiled_crc32c_is_crc32c() -> None:
    fast = compiled_checkpoint_module()
    rng = random.Random(7)
    assert fast.crc32c(b"123456789") == 0xE3069283
    for size in [*range(80), 1000, 4097]:
        data = rng.randbytes(size)
        assert fast.crc32c(data) == crc32c.crc32c(data) == fast.crc32c_software(data)
    assert fast.CRC32C_IMPL in {"sse4.2", "table"}


def test_the_compiled_crc32c_joins_its_lanes_right() -> None:
    """The hardware loop takes three lanes of 64 bytes at a time (bookie/_crc32c.h): sizes
    around multiples of 192 bytes, from unaligned addresses too."""
    fast = compiled_checkpoint_module()
    rng = random.Random(8)
    data = rng.randbytes(5000)
    for blocks in range(8):
        for extra in (-9, -8, -1, 0, 1, 7, 8, 63, 64, 65, 128):
            size = 192 * blocks + extra
            if size < 0:
                continue
            for start in (0, 1, 5):
                view = memoryview(data)[start : start + size]
                assert fast.crc32c(view) == crc32c.crc32c(view) == fast.crc32c_software(view)
    assert fast.crc32c(bytes(192)) == crc32c.crc32c(bytes(192))
    assert fast.crc32c(b"\xff" * 4096) == crc32c.crc32c(b"\xff" * 4096)


def test_the_compiled_loop_refuses_a_bad_state() -> None:
    fast = compiled_checkpoint_module()
    entries = [(1, 0, (-1, 0, b"x"))]
    with pytest.raises(TypeError):
        fast.append_entries(iter(entries), None, b"", 0, {}, {}, 0, 0, 0, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fast.append_entries(entries, None, bytearray(), 0, {}, {}, 0, 0, 0, 1, 1)
    with pytest.raises(ValueError):
        fast.append_entries(iter(entries), None, bytearray(), 5, {}, {}, 0, 0, 0, 1, 1)
    with pytest.raises(ValueError):
        fast.append_entries(iter(entries), None, bytearray(), 0, {}, {}, 1 << 32, 0, 0, 1, 1)
    with pytest.raises(TypeError):
        fast.append_entries(iter(entries))  # type: ignore[call-arg]


def test_a_failing_iterator_fails_the_compiled_loop_cleanly() -> None:
    fast = compiled_checkpoint_module()

    def entries() -> Iterator[Entry]:
        yield 1, 0, (-1, 0, b"x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fast.append_entries(entries(), None, bytearray(), 0, {}, {}, 0, 0, 0, 1 << 20, 1 << 20)

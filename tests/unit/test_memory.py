"""Keeping freed memory for reuse (walog/memory.py)."""

from __future__ import annotations

import ctypes
import sys

import pytest

from walog import memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_takes_on_glibc_once_per_process() -> None:
    assert memory.keep_freed_memory() is True
    assert memory.keep_freed_memory() is True  # a second call changes nothing


def test_keep_freed_memory_is_false_where_there_is_no_mallopt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_libc(*args: object, **kwargs: object) -> object:
        raise OSError("no such library")

    monkeypatch.setattr(memory, "_applied", None)
    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert memory.keep_freed_memory() is False

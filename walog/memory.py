"""Keeping freed memory for reuse instead of handing it back to the kernel (glibc malloc).

Clients and bookies allocate and free buffers of hundreds of KiB thousands of times a
second: packed entries, frames, gRPC's copies of them. With glibc's defaults, an allocation
of 128 KiB or more is its own ``mmap`` and freed memory above 128 KiB at the top of the heap
goes back to the kernel, so nearly every frame lands on fresh pages: a page fault and a
zeroed page per 4 KiB. Measured with ``walog bench --only ledger --seconds 6``, that is a
third of the client's CPU per entry and about a tenth of each bookie's.

:func:`keep_freed_memory` raises both thresholds (``mallopt``), so frames come from the heap
and freed memory stays there, up to a bound, for the next frame. It is process-wide: a
bookie applies it at start; a client applies it on :func:`walog.aio.connect` unless
``ClientConfig.keep_freed_memory`` is False. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

MMAP_THRESHOLD = 4 * 1024 * 1024
"""Allocations below this come from the heap (glibc's default: 128 KiB, adapting upwards)."""
TRIM_THRESHOLD = 64 * 1024 * 1024
"""Freed memory at the top of the heap is kept up to this much (glibc's default: 128 KiB)."""

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Make malloc keep freed memory for reuse (see the module docs), once per process.

    Returns:
        True when the process's allocator now keeps freed memory; False when it is not
        glibc's or refused the settings.
    """
    global _applied
    with _lock:
        if _applied is None:
            _applied = _apply()
        return _applied


def _apply() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl has no mallopt)
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

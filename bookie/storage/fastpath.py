"""The bookie's per-entry hot paths, compiled or pure Python, chosen once at import.

The compiled code lives in C extensions built by ``pip install -e .`` (setup.py):
``bookie.storage._fastadd`` (the add path's checks), selected here,
``bookie.storage._fastjournal`` (the journal's writer thread, selected by
bookie/storage/journal_writer.py) and ``bookie.storage._fastreplay`` (journal replay at
start, selected by bookie/storage/replay.py). Each returns exactly what its pure-Python
version returns.
``WALOG_PURE_PYTHON=1`` selects the pure-Python code, as does a checkout where an extension
is not built (the bookie warns at start): :mod:`walog._compiled` chooses.

The add path's checks, called by the event-loop thread for every add batch:

- :func:`unpack_entries`: :func:`walog.wire.packing.unpack_entries` (client code too, so
  the pure function stays there); journal replay at start unpacks with it too;
- :func:`refused_entries`: :func:`refused_entries_python`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import crc32c

from walog._compiled import compiled_module, pure_python_asked
from walog.wire.digest import DIGEST_HEADER
from walog.wire.packing import PackedEntry
from walog.wire.packing import unpack_entries as unpack_entries_python
from walog.wire.status import Status


def refused_entries_python(
    ledger_id: int,
    entries: Sequence[PackedEntry],
    max_entry_bytes: int,
) -> dict[int, Status]:
    """The entries of an add batch a bookie refuses, by entry id: BAD_REQUEST (negative ids,
    ``lac`` not below the entry id), ENTRY_TOO_LARGE (well-formed, with a payload over
    ``max_entry_bytes``) or DIGEST_MISMATCH. One pass, the digest inlined
    (:func:`~walog.wire.digest.entry_digest`): the add path's hottest loop."""
    refused: dict[int, Status] = {}
    header, crc = DIGEST_HEADER.pack, crc32c.crc32c
    bad_ledger = ledger_id < 0
    for entry_id, lac, digest, data in entries:
        if bad_ledger or entry_id < 0 or not -1 <= lac < entry_id:
            refused[entry_id] = Status.BAD_REQUEST
        elif len(data) > max_entry_bytes:
            refused[entry_id] = Status.ENTRY_TOO_LARGE
        elif crc(data, crc(header(ledger_id, entry_id, lac))) != digest:
            refused[entry_id] = Status.DIGEST_MISMATCH
    return refused


_fastadd = compiled_module("bookie.storage._fastadd")

#: The add path's checks, chosen once at import: True for the compiled ones.
COMPILED = _fastadd is not None
#: The journal's writer thread (bookie/storage/journal_writer.py): True for the compiled one.
JOURNAL_COMPILED = compiled_module("bookie.storage._fastjournal") is not None
#: Journal replay at start (bookie/storage/replay.py): True for the compiled one.
REPLAY_COMPILED = compiled_module("bookie.storage._fastreplay") is not None


def unbuilt() -> list[str]:
    """The compiled modules not built, when pure Python was not asked for: their hot paths
    run in pure Python anyway, at about three times the CPU (the bookie warns at start)."""
    if pure_python_asked():
        return []
    selected = {
        "bookie.storage._fastadd": COMPILED,
        "bookie.storage._fastjournal": JOURNAL_COMPILED,
        "bookie.storage._fastreplay": REPLAY_COMPILED,
    }
    return [name for name, compiled in selected.items() if not compiled]


unpack_entries: Callable[[bytes], tuple[list[PackedEntry], str | None]]
refused_entries: Callable[[int, Sequence[PackedEntry], int], dict[int, Status]]

if _fastadd is not None:
    _refused_compiled = _fastadd.refused_entries
    _BAD_REQUEST, _DIGEST_MISMATCH = Status.BAD_REQUEST, Status.DIGEST_MISMATCH
    _TOO_LARGE = Status.ENTRY_TOO_LARGE

    def _refused_entries_compiled(
        ledger_id: int,
        entries: Sequence[PackedEntry],
        max_entry_bytes: int,
    ) -> dict[int, Status]:
        """:func:`refused_entries_python`, compiled (bookie/storage/_fastadd.c)."""
        refused: dict[int, Status] = _refused_compiled(
            ledger_id, entries, max_entry_bytes, _BAD_REQUEST, _DIGEST_MISMATCH, _TOO_LARGE
        )
        return refused

    unpack_entries = _fastadd.unpack_entries
    refused_entries = _refused_entries_compiled
else:
    unpack_entries = unpack_entries_python
    refused_entries = refused_entries_python


__all__ = [
    "COMPILED",
    "REPLAY_COMPILED",
    "compiled_module",
    "pure_python_asked",
    "refused_entries",
    "refused_entries_python",
    "unbuilt",
    "unpack_entries",
    "unpack_entries_python",
]

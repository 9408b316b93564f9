"""Journal replay's per-record and per-entry work, compiled (bookie/storage/_fastreplay.c);
selected by bookie/storage/replay.py."""

from collections.abc import Callable
from typing import Final

#: "sse4.2" or "table": how the CRC32Cs are computed.
CRC32C_IMPL: Final[str]

def scan_frames(
    chunk: bytes | bytearray | memoryview, seed: int, max_record_bytes: int, /
) -> tuple[list[tuple[int, int]], int, str | None]:
    """``(frames, used, problem)``: the ``(payload offset, payload length)`` of the whole,
    intact records from ``chunk[0]`` on, where the first other one starts, and None when it
    is merely not whole in the chunk, else what is wrong with it. See
    bookie/storage/_fastreplay.c."""

def apply_entries(
    ledger_id: int,
    blob: bytes | bytearray | memoryview,
    present_of: Callable[[int, int], set[int]] | None,
    /,
) -> tuple[int, int, int, list[tuple[int, int]], list[int], str | None, bytes, bytes, int, int]:
    """Check one ADD record's entries; returns ``(accepted, last_entry_id, lac, runs, bad,
    problem, kept_ids, kept_starts, count, whole)``. See bookie/storage/_fastreplay.c."""

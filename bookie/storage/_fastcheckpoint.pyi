"""The per-entry work of a bookie checkpoint, compiled (bookie/storage/_fastcheckpoint.c)."""

from typing import Final

_Entry = tuple[int, int, tuple[int, int, bytes]]

DONE: Final[int]
ROLL: Final[int]
FLUSH: Final[int]
#: "sse4.2" or "table": how :func:`crc32c` computes.
CRC32C_IMPL: Final[str]

def append_entries(
    entries: object,
    held: _Entry | None,
    buf: bytearray,
    used: int,
    rows: dict[int, list[tuple[bytes, bytes]]],
    live: dict[int, dict[int, int]],
    log_id: int,
    offset: int,
    flushed: int,
    limit: int,
    chunk: int,
    /,
) -> tuple[int, _Entry | None, int, int, int]:
    """Append entries (an iterator of ``(ledger_id, entry_id, (lac, digest, data))``)
    to ``buf`` from ``used`` and their index rows to ``rows`` and ``live``; returns
    ``(status, held, used, offset, count)``. See bookie/storage/_fastcheckpoint.c."""

def crc32c(data: bytes | bytearray | memoryview, /) -> int:
    """CRC32C of ``data``, as ``crc32c.crc32c(data)``."""

def crc32c_software(data: bytes | bytearray | memoryview, /) -> int:
    """CRC32C of ``data`` by table (the fallback of :func:`crc32c`)."""

"""The per-entry checks of a bookie's add path, compiled (bookie/storage/_fastadd.c); selected by
bookie/storage/fastpath.py."""

from collections.abc import Iterable
from typing import Final, TypeVar

from walog.wire.packing import PackedEntry

_S = TypeVar("_S")

#: "sse4.2" or "table": how the digests' CRC32C is computed.
CRC32C_IMPL: Final[str]

def unpack_entries(blob: bytes | bytearray | memoryview, /) -> tuple[list[PackedEntry], str | None]:
    """The entries packed in ``blob`` and what is wrong with its tail (None when nothing),
    as :func:`walog.wire.packing.unpack_entries`."""

def refused_entries(
    ledger_id: int,
    entries: Iterable[tuple[int, int, int, bytes | bytearray | memoryview]],
    max_entry_bytes: int,
    bad_request: _S,
    digest_mismatch: _S,
    too_large: _S,
    /,
) -> dict[int, _S]:
    """The entries a bookie refuses, by entry id: ``bad_request``, ``too_large`` or
    ``digest_mismatch``,
    as :func:`bookie.storage.fastpath.refused_entries_python`."""

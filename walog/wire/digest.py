"""Entry digests and master keys, shared by clients and bookies.

Every entry carries a CRC32C over its header (ledger id, entry id, LAC as big-endian
int64s) and its payload. A bookie rejects an entry whose digest does not match; a client
rejects a read whose digest does not match. The master key of a ledger is derived from its
password; bookies remember the key of the first write or fence and refuse any other.
"""

from __future__ import annotations

import hashlib
import struct

import crc32c

#: The header a digest covers before the payload: ledger id, entry id, LAC.
DIGEST_HEADER = struct.Struct(">qqq")
MASTER_KEY_BYTES = 32


def entry_digest(ledger_id: int, entry_id: int, lac: int, data: bytes | memoryview) -> int:
    """CRC32C of an entry's header and payload, as an unsigned 32-bit integer."""
    crc = crc32c.crc32c(DIGEST_HEADER.pack(ledger_id, entry_id, lac))
    return int(crc32c.crc32c(data, crc))


def master_key(password: bytes) -> bytes:
    """The key bookies check for a ledger, derived from its password (SHA-256)."""
    return hashlib.sha256(b"walog-ledger:" + password).digest()


__all__ = ["DIGEST_HEADER", "MASTER_KEY_BYTES", "entry_digest", "master_key"]

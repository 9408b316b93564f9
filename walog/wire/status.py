"""A bookie's answer codes, as both ends of the wire read them."""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """Bookie return codes; numbers equal ``walog.wire.proto.bookie_pb2.Status``."""

    OK = 0
    NO_SUCH_LEDGER = 1
    NO_SUCH_ENTRY = 2
    FENCED = 3
    UNAUTHORIZED = 4
    READ_ONLY = 5
    TOO_MANY_REQUESTS = 6
    BAD_REQUEST = 7
    IO_ERROR = 8
    DIGEST_MISMATCH = 9
    ENTRY_TOO_LARGE = 10


__all__ = ["Status"]

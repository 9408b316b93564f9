"""Size limits both ends of the wire agree on."""

from __future__ import annotations

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest gRPC message either end sends or accepts: a batched frame holds many entries."""

DEFAULT_MAX_ENTRY_BYTES = 5 * 1024 * 1024
"""The default largest entry payload: clients refuse larger appends, bookies larger adds
(a bookie's default allows a little more, so that a client's default always fits)."""


__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "MAX_MESSAGE_BYTES"]

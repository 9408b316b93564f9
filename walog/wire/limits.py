"""Size limits both ends of the wire agree on."""

from __future__ import annotations

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest gRPC message either end sends or accepts: a batched frame holds many entries."""

DEFAULT_MAX_ENTRY_BYTES = 5 * 1024 * 1024
"""The one default of the largest entry payload, wherever a limit is set: a bookie refuses
larger adds (``--max-entry-bytes``, answered ENTRY_TOO_LARGE), a client larger appends
(``ClientConfig.max_entry_bytes``), and a log's writer makes no larger entry
(``LogConfig.max_entry_bytes``, ``LogWriterConfig.max_entry_bytes``). A log's writer checks
its limit at open against the client's and the one every available bookie announces in its
registration, and refuses to open with a larger one (docs/logs.md, "Record size")."""


__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "MAX_MESSAGE_BYTES"]

"""Settings of a client: time limits, entry and frame sizes, transport choices.

Plain values below the transport, so that every layer of the client (transport, ledger,
log) reads the same settings without importing a layer above it.
"""

from __future__ import annotations

import dataclasses

from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Client-side time limits, in seconds."""

    add: float = 10.0
    """An add not acknowledged by a bookie within this time makes that bookie be replaced."""
    read: float = 10.0
    """A read, fence or LAC read not answered within this time counts as *unknown*."""
    metadata: float = 10.0
    """A metadata store call (ZooKeeper or SQLite), retries while the connection is down
    included, that has not completed within this time fails with a retriable
    :class:`walog.MetadataError`; for a change (a ledger or log record written, a ledger id
    taken) its outcome is then unknown, and walog re-reads before acting on it. The
    connection itself is bounded by ``walog.connect(timeout=...)``."""
    explicit_lac: float = 0.1
    """An idle writer sends its LAC explicitly after this long without adds."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"Timeouts.{field.name} must be > 0 seconds")


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """Settings of a client, shared by all its ledgers."""

    timeouts: Timeouts = Timeouts()
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    """An entry larger than this is refused with ValueError before it takes an entry id."""
    max_frame_entries: int = 512
    """At most this many adds per frame sent to one bookie."""
    max_frame_bytes: int = 4 * 1024 * 1024
    """A frame is sent once it holds this many payload bytes."""
    lac_linger: float = 0.002
    """A writer appending steadily, at least this often, lets its next append carry a new
    LAC to the bookies (waiting at most this long) instead of sending it alone; 0 sends every
    LAC no append carried within a couple of event-loop turns at once."""
    native_transport: bool = True
    """Talk to bookies over their native port when they have one (a fraction of gRPC's CPU
    per message); False keeps every call on gRPC."""
    keep_freed_memory: bool = True
    """Make glibc's malloc keep freed memory for the next frame instead of returning it to
    the kernel (process-wide, see :mod:`walog.memory`); False leaves the allocator alone."""

    def __post_init__(self) -> None:
        if self.max_entry_bytes <= 0:
            raise ValueError("ClientConfig.max_entry_bytes must be > 0")
        if self.max_frame_entries <= 0 or self.max_frame_bytes <= 0:
            raise ValueError("ClientConfig frame limits must be > 0")
        if self.lac_linger < 0:
            raise ValueError(f"ClientConfig.lac_linger must be >= 0, got {self.lac_linger}")


__all__ = ["ClientConfig", "Timeouts"]

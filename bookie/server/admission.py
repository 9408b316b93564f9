"""What the bookie's calls count and bound: counters since start, add bytes in flight.

Shared by the service (bookie/server/service.py) and its add streams (bookie/server/add_stream.py).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ServiceStats:
    """Counters of the service since start (exported on the metrics endpoint)."""

    adds: int = 0
    add_bytes: int = 0
    failed_adds: int = 0
    rejected_adds: int = 0
    bad_requests: int = 0
    forces: int = 0
    reads: int = 0
    read_entries: int = 0
    read_bytes: int = 0
    long_polls: int = 0
    lac_watches: int = 0
    fences: int = 0
    entry_lists: int = 0
    add_streams: int = 0


class Admission:
    """A bound on the payload bytes of adds accepted but not answered yet.

    Args:
        limit: the most bytes in flight; above it adds are answered TOO_MANY_REQUESTS.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def try_acquire(self, size: int) -> bool:
        """Take ``size`` bytes if they fit under the limit, or if nothing is in flight (a
        batch larger than the limit must not be refused forever)."""
        if self.in_flight and self.in_flight + size > self.limit:
            return False
        self.in_flight += size
        return True

    def release(self, size: int) -> None:
        """Give back bytes taken by :meth:`try_acquire`."""
        self.in_flight -= size


__all__ = ["Admission", "ServiceStats"]

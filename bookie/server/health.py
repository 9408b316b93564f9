"""What a bookie tells orchestrators and probes about itself: alive, ready, writable.

Three questions, answered the same way over HTTP (``/healthz``, ``/readyz`` on the metrics
port) and over the standard gRPC health service:

- **alive** (``/healthz``): the event loop runs callbacks. A bookie whose loop is stuck
  answers nothing useful even if its threads still accept connections: restart it.
- **ready** (``/readyz``): registered as available and not draining. A read-only bookie
  is still ready: it serves reads. The gRPC services ``""`` and ``walog.bookie.v1.Bookie``
  are SERVING from the moment the port answers calls until the drain begins.
- **writable** (gRPC service ``walog.bookie.v1.Bookie.Writes``; ``/readyz?writes=1``):
  ready and accepting adds; NOT_SERVING while read-only (a full disk, a failed journal or
  checkpoint, a decommission mark) or while draining.

:class:`BookieHealth` reads the state from the running parts; nothing here changes it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
from collections.abc import Awaitable, Callable

import structlog

from bookie.storage.engine import BookieCore

log = structlog.get_logger("bookie.server.health")

WRITES_SERVICE = "walog.bookie.v1.Bookie.Writes"
"""The gRPC health service name that is SERVING only while the bookie accepts adds."""
LOOP_PROBE_TIMEOUT_S = 2.0
"""``/healthz`` fails when the event loop has not run a callback within this long."""
WATCH_INTERVAL_S = 0.5
"""How often the gRPC health statuses are brought up to date with the bookie's state."""


def read_only_reason(core: BookieCore) -> str | None:
    """Why the bookie refuses adds, or None while it accepts them (bookie/disks.py sets
    the reasons: a full disk, a failed checkpoint, a decommission mark)."""
    failed = core.journal.failed
    if failed is not None:
        # A failed journal refuses every write until the bookie restarts.
        return f"journal failed: {failed}"
    if core.read_only_reason is not None:
        return core.read_only_reason
    if core.storage_failure is not None:
        return f"storage failed: {core.storage_failure}"
    return None


class BookieState(enum.Enum):
    """Where a bookie stands, from the operator's point of view."""

    STARTING = "starting"
    """Serving gRPC but not registered as available yet."""
    WRITABLE = "writable"
    """Available: reads and writes."""
    READ_ONLY = "read-only"
    """Available for reads; adds are refused."""
    DRAINING = "draining"
    """Shutting down: no new calls."""


class BookieHealth:
    """The bookie's state as probes see it.

    Args:
        loop: the bookie's event loop (the liveness probe runs a callback on it).
        is_registered: True once the bookie is announced as available.
        is_draining: True once shutdown began.
        read_only_reason: why adds are refused, or None while they are accepted.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        is_registered: Callable[[], bool],
        is_draining: Callable[[], bool],
        read_only_reason: Callable[[], str | None],
    ) -> None:
        self._loop = loop
        self._is_registered = is_registered
        self._is_draining = is_draining
        self._read_only_reason = read_only_reason

    def state(self) -> tuple[BookieState, str]:
        """The state and one line saying why (read from any thread)."""
        if self._is_draining():
            return BookieState.DRAINING, "draining: shutting down"
        if not self._is_registered():
            return BookieState.STARTING, "starting: not registered as available yet"
        reason = self._read_only_reason()
        if reason is not None:
            return BookieState.READ_ONLY, f"read-only: {reason}"
        return BookieState.WRITABLE, "writable"

    def ready(self, *, writes: bool = False) -> tuple[bool, str]:
        """Whether the bookie is ready (``writes``: and writable), with the reason."""
        state, reason = self.state()
        wanted = (
            (BookieState.WRITABLE,) if writes else (BookieState.WRITABLE, BookieState.READ_ONLY)
        )
        return state in wanted, reason

    def alive(self) -> tuple[bool, str]:
        """Whether the event loop runs a callback within ``LOOP_PROBE_TIMEOUT_S``.

        Called from a thread other than the loop's (the HTTP server's).
        """
        ran: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            self._loop.call_soon_threadsafe(ran.set_result, None)
            ran.result(LOOP_PROBE_TIMEOUT_S)
        except RuntimeError:
            return False, "event loop closed"
        except concurrent.futures.TimeoutError:
            return False, f"event loop ran no callback within {LOOP_PROBE_TIMEOUT_S:g}s"
        return True, "alive"

    async def watch(self, apply: Callable[[BookieState], Awaitable[None]]) -> None:
        """Call ``apply`` with the state each time it changes (run as a task; cancel it)."""
        last: BookieState | None = None
        while True:
            state, reason = self.state()
            if state is not last:
                if last is not None:
                    log.info("bookie state changed", state=state.value, reason=reason)
                await apply(state)
                last = state
            # The state is read from counters other parts own (the journal's failure, the
            # registration): polling it keeps those parts free of health concerns.
            await asyncio.sleep(WATCH_INTERVAL_S)


__all__ = [
    "LOOP_PROBE_TIMEOUT_S",
    "WRITES_SERVICE",
    "BookieHealth",
    "BookieState",
    "read_only_reason",
]

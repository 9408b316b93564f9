"""When a ledger's writer tells its bookies the LAC by a message of its own.

Readers may read up to the LAC a bookie knows, and a bookie learns it from the next add
(piggybacked) or from an explicit LAC message on the add stream (docs/protocol.md, "LAC
piggybacking"). Two triggers send the explicit one: a new LAC that no append carried in
time, and, as the fallback, the timer of ``Timeouts.explicit_lac`` after the last append
(BookKeeper's explicitLacInterval). "In time" is a couple of loop turns (the futures
completed with the LAC run their callbacks first, so an awaiting appender appends again
before the check), or, for a writer appending steadily at least every
``ClientConfig.lac_linger``, until its next append is due: then tailers get the LAC with that
append instead of a message of its own to every bookie, which at such rates costs the writer
and the bookies about as much again as the append itself.

Bookies do not sync an explicit LAC, so one that restarted forgot it: an idle writer tells
its LAC again, twice as long after each time (up to :data:`LAC_REFRESH_MAX_S`), until it
appends again.

Only the event loop's clock is used: the simulator runs this unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from walog.config import ClientConfig

_GAP_SLACK = 1.5
"""A steady writer's next append is due this many times the last gap between two appends
after its last one."""

LAC_REFRESH_MAX_S = 30.0
"""An idle writer tells its LAC again at most this long after the last time (bookies forget
an explicit LAC in a restart)."""


class ExplicitLac:
    """The explicit LAC of one ledger writer: what its appends carried, the two triggers and
    the refreshes of an idle writer.

    The writer updates :attr:`told`, :attr:`last_append` and :attr:`gap` with every append
    (its hot path: plain attributes), calls :meth:`raised` when its LAC rises and
    :meth:`stop` when it stops or closes.

    Args:
        loop: the writer's event loop.
        config: the client's settings (``lac_linger``, ``Timeouts.explicit_lac``).
        lac: the writer's LAC now.
        tell: send the LAC to every healthy bookie of the writer's ensemble.
        stopped: whether the writer stopped (failed): nothing is sent any more.
        state: the writer's state (``open``, ``closing``, ``closed``): a closed writer arms
            no timer and sends nothing; only an open one refreshes.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        config: ClientConfig,
        *,
        lac: Callable[[], int],
        tell: Callable[[], None],
        stopped: Callable[[], bool],
        state: Callable[[], str],
    ) -> None:
        self._loop = loop
        self._linger = config.lac_linger
        self._interval = config.timeouts.explicit_lac
        self._lac = lac
        self._tell = tell
        self._stopped = stopped
        self._state = state
        self.told = -1
        """The highest LAC sent to the bookies (piggybacked or explicit)."""
        self.last_append = loop.time()
        """Loop time of the last append."""
        self.gap = 0.0
        """Time between the last two appends."""
        self._timer: asyncio.TimerHandle | None = None
        self._refresh: asyncio.TimerHandle | None = None  # an idle writer's LAC, again
        self._check_due = False  # a check whether an append carried the new LAC is due

    def raised(self) -> None:
        """The writer's LAC rose: see that the bookies learn it."""
        self._check_later()
        self._arm()

    def stop(self) -> None:
        """Cancel the timers (the writer stopped or closes)."""
        for timer in (self._timer, self._refresh):
            if timer is not None:
                timer.cancel()
        self._timer = self._refresh = None

    def send(self) -> None:
        """Tell every healthy bookie of the ensemble the LAC, unless it already knows; then
        tell it again now and then while the writer stays idle (:meth:`_refresh_lac`)."""
        if self._stopped() or self._state() == "closed":
            return
        lac = self._lac()
        if lac <= self.told:
            return
        self._tell()
        self.told = lac
        if self._refresh is not None:
            self._refresh.cancel()
        after = self._interval
        self._refresh = self._loop.call_later(after, self._refresh_lac, after)

    def _check_later(self) -> None:
        if self._check_due:
            return
        self._check_due = True
        wait = self._next_append_due()
        if wait > 0:
            self._loop.call_later(wait, self._check, self.told)
        else:
            self._loop.call_soon(self._loop.call_soon, self._check, self.told)

    def _next_append_due(self) -> float:
        """Seconds until a steady writer's next append is due (with some slack), at most
        ``lac_linger``; 0 for a writer that appends less often or has fallen silent."""
        linger = self._linger
        gap = self.gap
        if gap > linger:
            return 0.0
        due = self.last_append + _GAP_SLACK * gap - self._loop.time()
        return min(linger, max(0.0, due))

    def _check(self, told_before: int) -> None:
        self._check_due = False
        if self._lac() <= self.told:
            return
        if self.told > told_before:
            # An append carried an earlier LAC meanwhile: the next may carry this one.
            self._check_later()
        else:
            self.send()

    def _arm(self) -> None:
        if self._timer is None and self._state() != "closed":
            self._timer = self._loop.call_later(self._interval, self._due)

    def _due(self) -> None:
        self._timer = None
        if self._lac() <= self.told:
            return
        idle = self._loop.time() - self.last_append
        if idle < self._interval:
            self._timer = self._loop.call_later(self._interval - idle, self._due)
            return
        # Idle writer: the last entries' LAC would otherwise reach readers only with the
        # next append, so tell every bookie of the ensemble now.
        self.send()

    def _refresh_lac(self, waited: float) -> None:
        """An idle writer tells its LAC again, twice as long after each time (up to
        :data:`LAC_REFRESH_MAX_S`): bookies do not sync an explicit LAC, so one that
        restarted meanwhile forgot it, and a tailer would wait for the next append to learn
        that the last entries are confirmed. An append ends the refreshes (it carries the
        LAC; its own explicit LAC starts them again)."""
        self._refresh = None
        if self._stopped() or self._state() != "open":
            return
        if self._loop.time() - self.last_append < waited:
            return  # appended since: its LAC goes out with it or as a new explicit LAC
        self._tell()
        after = min(waited * 2, LAC_REFRESH_MAX_S)
        self._refresh = self._loop.call_later(after, self._refresh_lac, after)


__all__ = ["LAC_REFRESH_MAX_S", "ExplicitLac"]

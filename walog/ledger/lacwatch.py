"""The standing LAC watches behind a tailing reader.

A tailer used to send one long poll per LAC it learnt: a new RPC each time, and the news
that arrived between two polls waited for the next one. :class:`LacWatch` instead keeps
watches open (:meth:`walog.transport.base.BookieClient.watch_lac`) on bookies of the
ledger: each answers every time its LAC moves, bringing the newly confirmed entries along,
and sends a heartbeat when nothing happens. It watches ``Qw - Qa + 1`` bookies of the next
entry's write set: as many as the writer can do without, plus one, so a bookie slow enough
for the writer to leave it out of its ack quorums (a long pause, a busy disk) cannot hold
the tailer back either; the first answer to carry a LAC wins (BookKeeper's parallel
``readLastAddConfirmedAndEntry`` makes the same trade). Waiters of :meth:`LacWatch.wait`
are woken on every answer.

The watches run while someone waits: they start with the first wait and end on their own
once nobody has waited for :data:`WATCH_IDLE_S`. A watch that fails, or stays silent past
its heartbeat, hands over to another bookie of the ensemble (the least failed one, after a
pause when that is the same bookie again); a change of the ledger's ensemble moves the
watches to the new ensemble at once (:meth:`LacWatch.retarget`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import structlog

from walog.errors import BookieError, WalogError
from walog.transport.base import BookiePool, ReadReply, Status

log = structlog.get_logger("walog.ledger.lacwatch")

WATCH_HEARTBEAT_S = 2.0
"""A watched bookie without news sends its LAC this often (its silence is then a failure)."""
WATCH_IDLE_S = 30.0
"""Watches nobody has waited on for this long are closed (the next wait opens them again)."""
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
"""Pauses after consecutive failed watches of one bookie, in turn."""
_REFUSED = frozenset({Status.BAD_REQUEST, Status.UNAUTHORIZED})
"""Answers that carry no LAC: the watch counts them as a failure of that bookie."""

Target = Callable[[], tuple[Sequence[str], int, int, int]]
"""The reader's current choice: (bookies to watch, in order of preference; how many of them
to watch at once; LAC to start after; entries to bring along with each answer)."""


class LacWatch:
    """Waiters for one ledger's LAC, fed by standing watches on some of its bookies.

    Args:
        pool: the client's bookie connections.
        ledger_id: the watched ledger.
        target: called before each (re)start: which bookies, from which LAC, how many entries.
        on_reply: gets every answer and the bookie that sent it (on the event loop) before
            the waiters are woken.
    """

    def __init__(
        self,
        pool: BookiePool,
        ledger_id: int,
        target: Target,
        on_reply: Callable[[str, ReadReply], None],
    ) -> None:
        self._pool = pool
        self._ledger_id = ledger_id
        self._target = target
        self._on_reply = on_reply
        self._waiters: list[asyncio.Future[None]] = []
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._failures: dict[str, int] = {}  # consecutive failed watches per bookie
        self._last_wait = 0.0

    async def wait(self, timeout: float) -> None:  # noqa: ASYNC109 (the reader's deadline)
        """Return after the next answer or :meth:`wake`, or once ``timeout`` seconds pass."""
        loop = asyncio.get_running_loop()
        self._last_wait = loop.time()
        self._start_missing()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    def wake(self) -> None:
        """Wake every waiter (the LAC moved, or the ledger's metadata changed)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _resolve(waiter)

    def retarget(self) -> None:
        """Follow a new ensemble: stop watching the bookies no longer among the candidates
        and, while watches run, start others in their place."""
        if not self._watches:
            return
        wanted = set(self._target()[0])
        for bookie in [b for b in self._watches if b not in wanted]:
            self._watches.pop(bookie).cancel()
        self._start_missing()

    async def close(self) -> None:
        """Stop every watch and wake the waiters."""
        tasks = list(self._watches.values())
        self._watches.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.wake()

    def _start_missing(self) -> None:
        """Bring the running watches up to the number wanted: preferred bookies first,
        those whose watches failed last."""
        loop = asyncio.get_running_loop()
        candidates, count, _, _ = self._target()
        ranked = sorted(candidates, key=lambda b: self._failures.get(b, 0))  # stable
        for bookie in ranked:
            if len(self._watches) >= count:
                break
            if bookie not in self._watches:
                self._watches[bookie] = loop.create_task(
                    self._run(bookie), name=f"lac-watch-{self._ledger_id}-{bookie}"
                )

    async def _run(self, bookie: str) -> None:
        """Watch one bookie until nobody waits any more; after a failure, hand over to the
        least failed candidate (this bookie again, after a pause, if it is still that)."""
        loop = asyncio.get_running_loop()
        failures = self._failures.get(bookie, 0)
        try:
            if failures:
                await asyncio.sleep(_BACKOFF_S[min(failures - 1, len(_BACKOFF_S) - 1)])
            _, _, after, max_entries = self._target()
            started = loop.time()
            try:
                await self._follow(bookie, after, max_entries)
                self._failures.pop(bookie, None)
                return  # idle: nobody waits any more
            except WalogError as exc:
                log.info(
                    "LAC watch failed", ledger_id=self._ledger_id, bookie=bookie, error=str(exc)
                )
                # A watch that worked for a while starts its pauses over.
                worked = loop.time() - started > WATCH_HEARTBEAT_S
                self._failures[bookie] = 1 if worked else failures + 1
        finally:
            if self._watches.get(bookie) is asyncio.current_task():
                del self._watches[bookie]
        if loop.time() - self._last_wait < WATCH_IDLE_S:
            self._start_missing()

    async def _follow(self, bookie: str, after: int, max_entries: int) -> None:
        """Pass on the answers of one watch until it fails or nobody waits any more."""
        loop = asyncio.get_running_loop()
        answers = self._pool.get(bookie).watch_lac(
            self._ledger_id, after, max_entries=max_entries, heartbeat=WATCH_HEARTBEAT_S
        )
        try:
            async for reply in answers:
                if reply.status in _REFUSED:
                    raise BookieError(f"bookie {bookie} refused the LAC watch: {reply.status.name}")
                self._on_reply(bookie, reply)
                self.wake()
                if loop.time() - self._last_wait >= WATCH_IDLE_S and not self._waiters:
                    return
        finally:
            await answers.aclose()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


__all__ = ["WATCH_HEARTBEAT_S", "WATCH_IDLE_S", "LacWatch", "Target"]

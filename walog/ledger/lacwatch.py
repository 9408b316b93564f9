"""The standing LAC watch behind a tailing reader.

A tailer used to send one long poll per LAC it learnt: a new RPC each time, and the news
that arrived between two polls waited for the next one. :class:`LacWatch` instead keeps one
watch open on a bookie (:meth:`walog.transport.base.BookieClient.watch_lac`): the bookie
answers every time its LAC moves, bringing the newly confirmed entries along, and sends a
heartbeat when nothing happens. Waiters of :meth:`LacWatch.wait` are woken on every answer.

The watch runs while someone waits: it starts with the first wait and ends on its own once
nobody has waited for :data:`WATCH_IDLE_S`. A failed or silent bookie is replaced by the next
one of the write set after a short pause; a change of the ledger's ensemble that drops the
watched bookie moves the watch at once (:meth:`LacWatch.retarget`).
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
"""A watch nobody has waited on for this long is closed (the next wait opens it again)."""
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
"""Pauses after consecutive failed watches, in turn."""
_REFUSED = frozenset({Status.BAD_REQUEST, Status.UNAUTHORIZED})
"""Answers that carry no LAC: the watch counts them as a failure of that bookie."""

Target = Callable[[], tuple[Sequence[str], int, int]]
"""The reader's current choice: (bookies to watch, in order of preference; LAC to start
after; entries to bring along with each answer)."""


class LacWatch:
    """Waiters for one ledger's LAC, fed by a standing watch on one of its bookies.

    Args:
        pool: the client's bookie connections.
        ledger_id: the watched ledger.
        target: called before each (re)start: which bookies, from which LAC, how many entries.
        on_reply: gets every answer (on the event loop) before the waiters are woken.
    """

    def __init__(
        self,
        pool: BookiePool,
        ledger_id: int,
        target: Target,
        on_reply: Callable[[ReadReply], None],
    ) -> None:
        self._pool = pool
        self._ledger_id = ledger_id
        self._target = target
        self._on_reply = on_reply
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self._bookie: str | None = None
        self._last_wait = 0.0
        self._failures = 0

    async def wait(self, timeout: float) -> None:  # noqa: ASYNC109 (the reader's deadline)
        """Return after the next answer or :meth:`wake`, or once ``timeout`` seconds pass."""
        loop = asyncio.get_running_loop()
        self._last_wait = loop.time()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name=f"lac-watch-{self._ledger_id}")
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
        """Move the watch if its bookie is no longer the reader's choice (ensemble change)."""
        if self._bookie is not None and self._bookie not in self._target()[0]:
            self._restart()

    async def close(self) -> None:
        """Stop the watch and wake the waiters."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.wake()

    def _restart(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"lac-watch-{self._ledger_id}"
            )

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while loop.time() - self._last_wait < WATCH_IDLE_S:
                bookies, after, max_entries = self._target()
                if not bookies:
                    return
                self._bookie = bookies[self._failures % len(bookies)]
                try:
                    await self._follow(self._bookie, after, max_entries)
                    return  # idle: nobody waits any more
                except WalogError as exc:
                    log.info(
                        "LAC watch failed; trying the next bookie",
                        ledger_id=self._ledger_id,
                        bookie=self._bookie,
                        error=str(exc),
                    )
                pause = _BACKOFF_S[min(self._failures, len(_BACKOFF_S) - 1)]
                self._failures += 1
                await asyncio.sleep(pause)
        finally:
            self._bookie = None

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
                self._failures = 0
                self._on_reply(reply)
                self.wake()
                if loop.time() - self._last_wait >= WATCH_IDLE_S and not self._waiters:
                    return
        finally:
            await answers.aclose()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


__all__ = ["WATCH_HEARTBEAT_S", "WATCH_IDLE_S", "LacWatch", "Target"]

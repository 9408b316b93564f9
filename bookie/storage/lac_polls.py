"""Long polls for a ledger's LAC: a reader's request waits until the LAC passes what it
knows, or until its own time limit.

Whatever raises a LAC (an add's piggybacked LAC, an explicit update) wakes the ledger's
waiters, and so does its deletion; the engine's close releases every poll. Nothing polls:
a waiter looks at the LAC again only when woken.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class LacPolls:
    """The LAC long polls of one storage engine.

    Args:
        lac: the ledger's current LAC (-1 when unknown).
    """

    def __init__(self, lac: Callable[[int], int]) -> None:
        self._lac = lac
        self._waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._released = False

    async def wait(self, ledger_id: int, previous_lac: int, timeout: float) -> int:  # noqa: ASYNC109 (long-poll timeout is part of the request)
        """The LAC as soon as it exceeds ``previous_lac``, else at ``timeout`` (or once
        the polls were released) the current LAC."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._lac(ledger_id) <= previous_lac and not self._released:
                    waiter: asyncio.Future[None] = loop.create_future()
                    waiters = self._waiters.setdefault(ledger_id, [])
                    waiters.append(waiter)
                    try:
                        await waiter
                    finally:
                        if waiter in waiters:
                            waiters.remove(waiter)
                        if not waiters:
                            self._waiters.pop(ledger_id, None)
        return self._lac(ledger_id)

    def wake(self, ledger_id: int) -> None:
        """The ledger's LAC rose (or the ledger is gone): its waiters look again."""
        for waiter in self._waiters.pop(ledger_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    def release(self) -> None:
        """Answer every poll now, and every later one at once (the engine closes)."""
        self._released = True
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


__all__ = ["LacPolls"]

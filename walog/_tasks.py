"""Stopping asyncio tasks without losing a cancellation of the caller.

``task.cancel()`` followed by ``with suppress(CancelledError): await task`` has a window:
when the *caller* is cancelled while it waits for the task to end, the caller's own
``CancelledError`` comes out of that ``await`` too and is suppressed with the task's. The
caller then goes on as if nothing happened: a ``close()`` that cancels a service loop
caught in that window waits for it forever, because the loop swallowed the cancellation
meant to stop it. :func:`cancel_and_wait` tells the two apart (``Task.cancelling()``).
``tests/unit/test_cancellation.py`` refuses the bare pattern anywhere in the code.
"""

from __future__ import annotations

import asyncio
from typing import Any

from walog import mutations


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and wait until each has ended.

    A task's own cancellation is absorbed; an exception a task raised instead propagates
    (the remaining tasks are still cancelled, and waited for). When the calling task is
    cancelled *while it waits* (``Task.cancelling()`` grew), its ``CancelledError``
    propagates once the tasks have ended. A cancellation the caller was already handling
    when it called (stopping children in a ``finally``) goes on propagating from there.
    """
    for task in tasks:
        task.cancel()
    current = asyncio.current_task()
    requested = current.cancelling() if current is not None else 0
    failure: BaseException | None = None
    for task in tasks:
        try:
            await task
        except asyncio.CancelledError as exc:
            if mutations.enabled("stop_swallows_own_cancel"):
                continue
            if current is not None and current.cancelling() > requested and failure is None:
                failure = exc  # ours, not only the task's: raised once all have ended
        except Exception as exc:
            if failure is None:
                failure = exc
    if failure is not None:
        raise failure


__all__ = ["cancel_and_wait"]

"""Where results go: the sink protocol of one operation's result, and one future for a batch.

The writers complete each append into a :class:`Sink`: an asyncio future, a
``concurrent.futures`` future, or a slot of :class:`BatchSinks` (one future for a batch of
appends, the sync API's ``append_many``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Generic, Protocol, TypeVar

T_contra = TypeVar("T_contra", contravariant=True)


class Sink(Protocol[T_contra]):
    """Where one operation's result (or failure) goes: an asyncio or a
    ``concurrent.futures`` future, or a lighter object with the same three methods
    (:class:`BatchSinks` hands out one per record of a batch)."""

    def done(self) -> bool:
        """True once a result or an exception was set (or the caller cancelled)."""

    def set_result(self, result: T_contra, /) -> None:
        """The operation succeeded with ``result``. On a sink settled already it may raise
        one of :data:`ALREADY_SETTLED` (futures do) or do nothing."""

    def set_exception(self, exception: BaseException, /) -> None:
        """The operation failed."""


R = TypeVar("R")

ALREADY_SETTLED = (asyncio.InvalidStateError, concurrent.futures.InvalidStateError)
"""What ``set_result`` raises on a future that is settled already (a caller cancelled it):
trying and catching costs one lock of a ``concurrent.futures`` future where asking
``done()`` first costs two."""


class BatchSinks(Generic[R]):
    """One future for a batch of operations: :meth:`slot` gives each operation a
    :class:`Sink`; the future gets every result, in order, once all succeeded, or the first
    failure (the operations before it may have succeeded).

    The future must be running already (``set_running_or_notify_cancel``), so that nobody
    but these sinks settles it: whether it is settled is then a flag here, and a sink asks
    the flag, not the future (whose ``done()`` takes a lock), once per operation.
    """

    __slots__ = ("future", "remaining", "results", "settled")

    def __init__(self, count: int, future: concurrent.futures.Future[list[R]]) -> None:
        self.future = future
        self.results: list[Any] = [None] * count
        self.remaining = count
        self.settled = count == 0
        if count == 0:
            future.set_result([])

    def slot(self, index: int) -> _Slot[R]:
        """The sink of operation ``index``."""
        return _Slot(self, index)

    def fail(self, exception: BaseException) -> None:
        """Fail the future with ``exception`` unless it is settled already."""
        if not self.settled:
            self.settled = True
            self.future.set_exception(exception)


class _Slot(Generic[R]):
    __slots__ = ("batch", "index")

    def __init__(self, batch: BatchSinks[R], index: int) -> None:
        self.batch = batch
        self.index = index

    def done(self) -> bool:
        return self.batch.settled

    def set_result(self, result: R, /) -> None:
        batch = self.batch
        batch.results[self.index] = result
        batch.remaining -= 1
        if batch.remaining == 0 and not batch.settled:
            batch.settled = True
            batch.future.set_result(batch.results)

    def set_exception(self, exception: BaseException, /) -> None:
        self.batch.fail(exception)


__all__ = ["ALREADY_SETTLED", "BatchSinks", "Sink"]

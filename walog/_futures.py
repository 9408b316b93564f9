"""The futures the sync facades return: a ``concurrent.futures.Future`` made for one thread
that settles many of them (the event loop) and others that mostly find them settled.

A plain ``concurrent.futures.Future`` carries a ``threading.Condition`` (a Python object
around a reentrant lock) and takes it for every call: creating, starting, settling and
reading one result costs four lock round trips through Python code. :class:`LightFuture`
is the same class to its users (a subclass: ``isinstance``, ``concurrent.futures.wait``,
``as_completed`` and ``asyncio.wrap_future`` work unchanged) without that per-record price:

- its state is a plain attribute, written by the thread that settles it and read without a
  lock: ``result()``, ``done()`` on a settled future take none;
- the condition, the waiters of ``concurrent.futures.wait`` and the done callbacks live in a
  part created only when a thread has to wait, add a callback or cancel (:class:`_Slow`);
- starting and settling a future that has no such part is decided under one process-wide
  leaf lock (:data:`_GATE`, a C lock held for a few attribute reads and writes): either the
  part exists and the change is made under its condition, as ``concurrent.futures`` makes
  every change, or the change is made before any part can exist, and the part created later
  sees it. A waiter therefore never misses the settling of its future, and a future is
  never settled twice (a second ``set_result`` raises ``InvalidStateError``, as it does on
  any ``concurrent.futures.Future``).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    LOGGER,
    PENDING,
    RUNNING,
)
from typing import Any, TypeVar

T = TypeVar("T")

_GATE = threading.Lock()
"""Makes "no slow part yet, so change the state" one step against the creation of a slow
part. A leaf: nothing else is acquired while it is held."""

_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
_CANCELLED = (CANCELLED, CANCELLED_AND_NOTIFIED)


class _Slow:
    """What a future needs once a thread waits on it, adds a callback or cancels it."""

    __slots__ = ("callbacks", "cond", "waiters")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.waiters: list[Any] = []  # concurrent.futures.wait's and as_completed's
        self.callbacks: list[Callable[[Any], object]] = []


class LightFuture(concurrent.futures.Future[T]):
    """A ``concurrent.futures.Future`` that takes no lock of its own until a thread has to
    wait on it (see the module's docstring). Same methods, same meaning.

    Make one with ``LightFuture()`` or, on a hot path, ``object.__new__(LightFuture)``:
    every attribute starts as a class default.
    """

    # Class defaults: a new future is PENDING with nothing else; the base's __init__ (which
    # builds a Condition) never runs.
    _state = PENDING
    _result = None
    _exception = None
    _slow: _Slow | None = None

    def __init__(self) -> None:
        """A PENDING future (the class defaults hold; the base's Condition is not made)."""

    # -- the slow part ---------------------------------------------------------------------

    def _slow_part(self) -> _Slow:
        slow = self._slow
        if slow is None:
            with _GATE:
                slow = self._slow
                if slow is None:
                    slow = self._slow = _Slow()
        return slow

    # concurrent.futures.wait() and as_completed() take a future's _condition and add to its
    # _waiters directly.
    @property
    def _condition(self) -> threading.Condition:
        return self._slow_part().cond

    @_condition.setter
    def _condition(self, value: threading.Condition) -> None:
        raise AttributeError("a LightFuture's condition is its own")

    @property
    def _waiters(self) -> list[Any]:
        return self._slow_part().waiters

    @_waiters.setter
    def _waiters(self, value: list[Any]) -> None:
        raise AttributeError("a LightFuture's waiters are its own")

    # -- reading ---------------------------------------------------------------------------

    def __repr__(self) -> str:
        state = self._state
        if state == FINISHED:
            outcome = (
                f"raised {type(self._exception).__name__}"
                if self._exception is not None
                else f"returned {type(self._result).__name__}"
            )
            return f"<{type(self).__name__} at {id(self):#x} state=finished {outcome}>"
        return f"<{type(self).__name__} at {id(self):#x} state={state.lower()}>"

    def cancelled(self) -> bool:
        """True if the future was cancelled."""
        return self._state in _CANCELLED

    def running(self) -> bool:
        """True while the operation runs (handed over, not settled yet)."""
        return self._state == RUNNING

    def done(self) -> bool:
        """True once the future was cancelled or settled."""
        return self._state in _DONE

    def result(self, timeout: float | None = None) -> T:
        """The operation's result, waiting up to ``timeout`` seconds (None: no limit).

        Raises:
            CancelledError: the future was cancelled.
            TimeoutError: ``timeout`` passed first.
            Exception: the operation's failure.
        """
        if self._state == FINISHED:  # settled: the state never changes again
            exception = self._exception
            if exception is None:
                return self._result  # type: ignore[return-value]
            try:
                raise exception
            finally:
                del exception, self  # no reference cycle through the traceback
        return self._settled(timeout)._outcome()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The operation's failure (None if it succeeded), waiting as :meth:`result` does.

        Raises:
            CancelledError: the future was cancelled.
            TimeoutError: ``timeout`` passed first.
        """
        if self._state != FINISHED:
            self._settled(timeout)
        return self._exception

    def _settled(self, timeout: float | None) -> LightFuture[T]:
        """Wait (once, as ``concurrent.futures`` does) until settled; raise
        ``CancelledError`` or ``TimeoutError`` as ``result()`` does; return ``self``."""
        slow = self._slow_part()
        with slow.cond:
            if self._state not in _DONE:
                slow.cond.wait(timeout)
            state = self._state
        if state in _CANCELLED:
            raise concurrent.futures.CancelledError()
        if state != FINISHED:
            raise TimeoutError()
        return self

    def _outcome(self) -> T:
        exception = self._exception
        if exception is None:
            return self._result  # type: ignore[return-value]
        try:
            raise exception
        finally:
            del exception, self

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[T]], object]) -> None:
        """Call ``fn(self)`` once the future is settled or cancelled (now, if it is), in the
        thread that settles it; callbacks run in the order they were added."""
        slow = self._slow_part()
        with slow.cond:
            if self._state not in _DONE:
                slow.callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:
            LOGGER.exception("exception calling callback for %r", self)

    # -- changing the state ----------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the future unless its operation was handed over or it is settled; True
        if it is cancelled."""
        slow = self._slow_part()
        with slow.cond:
            state = self._state
            if state in (RUNNING, FINISHED):
                return False
            if state in _CANCELLED:
                return True
            self._state = CANCELLED
            slow.cond.notify_all()
        self._invoke_callbacks()
        return True

    def set_running_or_notify_cancel(self) -> bool:
        """Mark the operation handed over (True), or tell the waiters of a cancelled future
        (False).

        Raises:
            RuntimeError: called twice, or after the future was settled.
        """
        with _GATE:
            if self._slow is None and self._state == PENDING:
                self._state = RUNNING
                return True
        slow = self._slow_part()
        with slow.cond:
            state = self._state
            if state == CANCELLED:
                self._state = CANCELLED_AND_NOTIFIED
                for waiter in slow.waiters:
                    waiter.add_cancelled(self)
                return False
            if state == PENDING:
                self._state = RUNNING
                return True
        LOGGER.critical("Future %s in unexpected state: %s", id(self), state)
        raise RuntimeError("Future in unexpected state")

    def set_result(self, result: T) -> None:
        """Settle the future with ``result``.

        Raises:
            InvalidStateError: the future is settled or cancelled already.
        """
        with _GATE:
            if self._slow is None and (self._state == RUNNING or self._state == PENDING):
                self._result = result
                self._state = FINISHED  # last: a reader that sees it sees the result
                return
        self._settle_slowly(result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        """Settle the future with ``exception``.

        Raises:
            InvalidStateError: the future is settled or cancelled already.
        """
        with _GATE:
            if self._slow is None and (self._state == RUNNING or self._state == PENDING):
                self._exception = exception
                self._state = FINISHED
                return
        self._settle_slowly(None, exception)

    def _settle_slowly(self, result: T | None, exception: BaseException | None) -> None:
        slow = self._slow_part()
        with slow.cond:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._result = result
            self._exception = exception
            self._state = FINISHED
            for waiter in slow.waiters:
                if exception is None:
                    waiter.add_result(self)
                else:
                    waiter.add_exception(self)
            slow.cond.notify_all()
        self._invoke_callbacks()

    def _invoke_callbacks(self) -> None:
        # Only once the state is final: no callback is added after that.
        slow = self._slow
        if slow is None:
            return
        for callback in slow.callbacks:
            try:
                callback(self)
            except Exception:
                LOGGER.exception("exception calling callback for %r", self)


def start_all(pairs: list[tuple[Any, LightFuture[Any]]]) -> bool:
    """Mark the futures of ``pairs`` (``(item, future)`` each) handed over, as
    ``set_running_or_notify_cancel`` does, under one acquisition of the gate for them all;
    return False when some could not be marked so (cancelled, waited on or settled before:
    ask those one by one)."""
    every = True
    with _GATE:
        for _, future in pairs:
            if future._slow is None and future._state == PENDING:
                future._state = RUNNING
            else:
                every = False
    return every


__all__ = ["LightFuture", "start_all"]

"""The futures the sync facades return: a ``concurrent.futures.Future`` made for one thread
that settles many of them (the event loop) and others that mostly find them settled.

A plain ``concurrent.futures.Future`` carries a ``threading.Condition`` (a Python object
around a reentrant lock) and takes it for every call: creating, starting, settling and
reading one result costs four lock round trips through Python code. :class:`LightFuture`
is the same class to its users (a subclass: ``isinstance``, ``concurrent.futures.wait``,
``as_completed`` and ``asyncio.wrap_future`` work unchanged) without that per-record price.

Its state is kept twice:

- ``_raw``, a plain attribute read without a lock: ``result()`` and ``done()`` on a settled
  future take none, and the event loop settles a started future by writing the result and
  then ``_raw`` (a reader that sees FINISHED sees the result);
- the state under the future's condition (``_Slow.state``, what ``concurrent.futures.wait``
  and ``as_completed`` read as ``_state``), with the condition itself, the waiters of those
  two and the done callbacks: made only when a thread has to wait on the future, add a
  callback or cancel it (:class:`_Slow`), then changed only under the condition, as
  ``concurrent.futures`` changes every state.

Whoever makes the slow part publishes it and then reads ``_raw``, holding its condition; the
loop writes ``_raw`` and then looks for a slow part. Under the interpreter lock these steps
fall in one order, so one of the two sees the other's: a part made after the settling starts
out settled (nothing waited on it before), and a settling after the part was made moves the
state under the condition itself, telling every waiter and callback once. A waiter therefore
never misses the settling of its future, and a future is never settled twice (a second
``set_result`` raises ``InvalidStateError``, as it does on any ``concurrent.futures.Future``).
The lock-free settling is for the one thread that settles started futures (the loop, which
also starts them); anything else settles through the condition.
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
"""Serialises making slow parts with each other and with :func:`start_all`'s "no slow part
yet, so mark it running". A leaf: nothing else is acquired while it is held."""

_new = object.__new__
_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
_CANCELLED = (CANCELLED, CANCELLED_AND_NOTIFIED)


class _Slow:
    """What a future needs once a thread waits on it, adds a callback or cancels it."""

    __slots__ = ("callbacks", "cond", "state", "waiters")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.state = PENDING  # set from the future's _raw before anyone else sees this part
        self.waiters: list[Any] = []  # concurrent.futures.wait's and as_completed's
        self.callbacks: list[Callable[[Any], object]] = []


class LightFuture(concurrent.futures.Future[T]):
    """A ``concurrent.futures.Future`` that takes no lock of its own until a thread has to
    wait on it (see the module's docstring). Same methods, same meaning.

    Make one with ``LightFuture()``, or on a hot path with :func:`new_future` (the same
    without a call of ``__init__``).
    """

    # Slots, not the instance dict: the loop and the callers' threads both write these, and
    # a dict's entries may be moved (when it outgrows its shared keys) by one thread while
    # another writes, losing that write. A slot is one pointer, written in one step.
    __slots__ = ("_exception", "_raw", "_result", "_slow")

    def __init__(self) -> None:
        """A PENDING future (the base's __init__, which builds a Condition, does not run)."""
        self._raw = PENDING
        self._slow: _Slow | None = None
        self._result: T | None = None
        self._exception: BaseException | None = None

    # -- the slow part ---------------------------------------------------------------------

    def _slow_part(self) -> _Slow:
        slow = self._slow
        if slow is None:
            with _GATE:
                slow = self._slow
                if slow is None:
                    slow = _Slow()
                    with slow.cond:
                        self._slow = slow  # published first, then _raw read (see above)
                        slow.state = self._raw
        return slow

    # concurrent.futures.wait() and as_completed() read _state and add to _waiters under
    # _condition, directly.
    @property
    def _condition(self) -> threading.Condition:
        return self._slow_part().cond

    @_condition.setter
    def _condition(self, value: threading.Condition) -> None:
        raise AttributeError("a LightFuture's condition is its own")

    @property
    def _state(self) -> str:
        slow = self._slow
        return self._raw if slow is None else slow.state

    @_state.setter
    def _state(self, value: str) -> None:
        raise AttributeError("a LightFuture's state changes through its methods")

    @property
    def _waiters(self) -> list[Any]:
        return self._slow_part().waiters

    @_waiters.setter
    def _waiters(self, value: list[Any]) -> None:
        raise AttributeError("a LightFuture's waiters are its own")

    # -- reading ---------------------------------------------------------------------------

    def __repr__(self) -> str:
        state = self._raw
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
        return self._raw in _CANCELLED

    def running(self) -> bool:
        """True while the operation runs (handed over, not settled yet)."""
        return self._raw == RUNNING

    def done(self) -> bool:
        """True once the future was cancelled or settled."""
        return self._raw in _DONE

    def result(self, timeout: float | None = None) -> T:
        """The operation's result, waiting up to ``timeout`` seconds (None: no limit).

        Raises:
            CancelledError: the future was cancelled.
            TimeoutError: ``timeout`` passed first.
            Exception: the operation's failure.
        """
        if self._raw is not FINISHED:
            self._wait(timeout)
        exception = self._exception
        if exception is None:
            return self._result  # type: ignore[return-value]
        try:
            raise exception
        finally:
            del exception, self  # no reference cycle through the traceback

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The operation's failure (None if it succeeded), waiting as :meth:`result` does.

        Raises:
            CancelledError: the future was cancelled.
            TimeoutError: ``timeout`` passed first.
        """
        if self._raw is not FINISHED:
            self._wait(timeout)
        return self._exception

    def _wait(self, timeout: float | None) -> None:
        """Wait (once, as ``concurrent.futures`` does) until settled; raise
        ``CancelledError`` or ``TimeoutError`` as ``result()`` does."""
        slow = self._slow_part()
        with slow.cond:
            if slow.state not in _DONE:
                slow.cond.wait(timeout)
            state = slow.state
        if state in _CANCELLED:
            raise concurrent.futures.CancelledError()
        if state != FINISHED:
            raise TimeoutError()

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[T]], object]) -> None:
        """Call ``fn(self)`` once the future is settled or cancelled (now, if it is), in the
        thread that settles it; callbacks run in the order they were added."""
        slow = self._slow_part()
        with slow.cond:
            if slow.state not in _DONE:
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
            state = slow.state
            if state in (RUNNING, FINISHED):
                return False
            if state in _CANCELLED:
                return True
            slow.state = self._raw = CANCELLED
            slow.cond.notify_all()
        self._invoke_callbacks(slow)
        return True

    def set_running_or_notify_cancel(self) -> bool:
        """Mark the operation handed over (True), or tell the waiters of a cancelled future
        (False).

        Raises:
            RuntimeError: called twice, or after the future was settled.
        """
        if start_all([(None, self)]):
            return True
        slow = self._slow_part()
        with slow.cond:
            state = slow.state
            if state == CANCELLED:
                slow.state = self._raw = CANCELLED_AND_NOTIFIED
                for waiter in slow.waiters:
                    waiter.add_cancelled(self)
                return False
            if state == PENDING:
                slow.state = self._raw = RUNNING
                return True
        LOGGER.critical("Future %s in unexpected state: %s", id(self), state)
        raise RuntimeError("Future in unexpected state")

    def set_result(self, result: T) -> None:
        """Settle the future with ``result``.

        Raises:
            InvalidStateError: the future is settled or cancelled already.
        """
        if self._raw is RUNNING:  # started: only the thread that settles it changes it now
            self._result = result
            self._raw = FINISHED  # after the result: a reader that sees it sees the result
            if self._slow is None:
                return  # a slow part made from now on starts out settled
            self._publish(self._slow, None)
            return
        self._settle(result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        """Settle the future with ``exception``.

        Raises:
            InvalidStateError: the future is settled or cancelled already.
        """
        if self._raw is RUNNING:
            self._exception = exception
            self._raw = FINISHED
            if self._slow is None:
                return
            self._publish(self._slow, exception)
            return
        self._settle(None, exception)

    def _publish(self, slow: _Slow, exception: BaseException | None) -> None:
        """Move the state under the condition to FINISHED after ``_raw`` was (unless the slow
        part, made meanwhile, started out so), telling the waiters and callbacks."""
        with slow.cond:
            if slow.state == FINISHED:
                return  # made after the settling: nobody waited or added a callback before
            slow.state = FINISHED
            self._tell_waiters(slow, exception)
        self._invoke_callbacks(slow)

    def _settle(self, result: T | None, exception: BaseException | None) -> None:
        """Settle through the condition (a future not started, or settled already)."""
        slow = self._slow_part()
        with slow.cond:
            if slow.state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{slow.state}: {self!r}")
            self._result = result
            self._exception = exception
            slow.state = self._raw = FINISHED
            self._tell_waiters(slow, exception)
        self._invoke_callbacks(slow)

    def _tell_waiters(self, slow: _Slow, exception: BaseException | None) -> None:
        for waiter in slow.waiters:
            if exception is None:
                waiter.add_result(self)
            else:
                waiter.add_exception(self)
        slow.cond.notify_all()

    def _invoke_callbacks(self, slow: _Slow | None = None) -> None:
        # Only once the state is final: no callback is added after that.
        if slow is None:
            slow = self._slow
        if slow is None:
            return
        for callback in slow.callbacks:
            try:
                callback(self)
            except Exception:
                LOGGER.exception("exception calling callback for %r", self)


def new_future() -> LightFuture[Any]:
    """A PENDING :class:`LightFuture`, as ``LightFuture()`` makes it, without the call of
    ``__init__``; ``_result`` is set when it is settled (read only then)."""
    future: LightFuture[Any] = _new(LightFuture)
    future._raw = PENDING
    future._slow = None
    future._exception = None
    return future


def start_all(pairs: list[tuple[Any, LightFuture[Any]]]) -> bool:
    """Mark the futures of ``pairs`` (``(item, future)`` each) handed over, as
    ``set_running_or_notify_cancel`` does, under one acquisition of the gate for them all;
    return False when some could not be marked so (cancelled, waited on or settled before:
    ask those one by one)."""
    every = True
    with _GATE:
        for _, future in pairs:
            if future._slow is None and future._raw is PENDING:
                future._raw = RUNNING
            else:
                every = False
    return every


__all__ = ["LightFuture", "new_future", "start_all"]

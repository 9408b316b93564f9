"""The event-loop thread behind every sync facade.

One daemon thread per process runs one asyncio event loop; sync APIs submit coroutines to it
and wait on ``concurrent.futures.Future`` objects. Hot paths (appends) must not hop threads
per call: they hand work over in batches (:class:`Handoff`, one wake-up per batch).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

from walog._futures import LightFuture, new_future, start_all
from walog._loop import new_event_loop
from walog._sinks import BatchSinks, Sink

T = TypeVar("T")
R = TypeVar("R")


def name_os_thread() -> None:
    """Give the calling thread's Python name to its OS thread (Linux ``comm``, 15 bytes), so
    ``top -H``, ``/proc`` and profilers tell the threads apart. Best effort: no-op elsewhere."""
    name = threading.current_thread().name.encode()[:15]
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "wb") as comm:
            comm.write(name)
    except OSError:
        pass


class LoopThread:
    """A daemon thread running an asyncio event loop.

    Use :meth:`instance` for the process-wide loop; a forked child gets a fresh one (an event
    loop and its thread do not survive ``fork``).
    """

    _instance: ClassVar[LoopThread | None] = None
    _instance_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str = "walog-loop") -> None:
        self.loop = new_event_loop()
        self._pid = os.getpid()
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(started.set)
            self.loop.run_forever()

        self._thread = threading.Thread(target=main, name=name, daemon=True)
        self._thread.start()
        started.wait()

    @classmethod
    def instance(cls) -> LoopThread:
        """The process-wide loop thread, started on first use."""
        with cls._instance_lock:
            current = cls._instance
            if current is None or current._pid != os.getpid() or not current.is_alive():
                current = cls._instance = cls()
            return current

    def is_alive(self) -> bool:
        """True while the loop thread runs."""
        return self._thread.is_alive() and not self.loop.is_closed()

    def in_loop_thread(self) -> bool:
        """True when called from the loop thread itself."""
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; its result arrives in the returned future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (at most ``timeout`` seconds).

        Raises:
            RuntimeError: when called from the loop thread (it would wait on itself).
            TimeoutError: when ``timeout`` passes first; the coroutine is cancelled.
        """
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError(
                "a sync walog call was made from its own event loop thread; "
                "use walog.aio from coroutines"
            )
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():
                # The operation's own TimeoutError (the same class since Python 3.11), or
                # it finished just as the wait ran out: its outcome, not ours.
                return future.result()
            future.cancel()
            raise TimeoutError(f"operation did not finish within {timeout} seconds") from None

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the loop thread soon (one thread hop)."""
        self.loop.call_soon_threadsafe(callback)

    def stop(self) -> None:
        """Stop the loop and join the thread (tests; the process-wide loop is a daemon)."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class SyncContext:
    """Base of the sync facades: a context manager whose exit calls ``close()``."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release what this object holds."""
        raise NotImplementedError


class Handoff(Generic[R]):
    """Hands payloads from user threads to the loop in batches: one wake-up per batch.

    :meth:`put` (any thread) queues a payload with a fresh :class:`LightFuture` (a
    ``concurrent.futures.Future`` that takes no lock until a thread waits on it) and wakes
    the loop only when no drain is scheduled yet; :meth:`put_many` queues a list of payloads
    with one future for all of them. :meth:`drain` (loop thread) calls ``submit(payload,
    sink)`` for every queued payload, in queue order, the future itself being the sink.
    ``submit`` must resolve the sink eventually; an exception it raises fails that sink
    (and, in a list, the payloads after it are not submitted).
    """

    def __init__(self, loop: LoopThread, submit: Callable[[Any, Sink[R]], None]) -> None:
        self._loop = loop
        self._submit = submit
        # (payload, its future) or (list of payloads, the list's future). No lock: a deque's
        # append and popleft are atomic, and a put that finds a drain scheduled has queued
        # its item before the drain clears the flag, so the drain takes it (see drain()).
        self._queue: collections.deque[tuple[Any, LightFuture[Any]]] = collections.deque()
        self._drain_scheduled = False

    def put(self, payload: Any) -> LightFuture[R]:
        """Queue ``payload``; the returned future resolves as ``submit`` decides."""
        future: LightFuture[R] = new_future()
        self._queue.append((payload, future))
        if not self._drain_scheduled:
            self._wake()
        return future

    def put_many(self, payloads: list[Any]) -> LightFuture[list[R]]:
        """Queue ``payloads`` in order; the future resolves with all their results."""
        future: LightFuture[list[R]] = new_future()
        self._queue.append((payloads, future))
        if not self._drain_scheduled:
            self._wake()
        return future

    def _wake(self) -> None:
        # Two threads may both get here: the second drain finds less or nothing to do.
        self._drain_scheduled = True
        self._loop.call_soon(self.drain)

    def drain(self) -> None:
        """Loop thread: submit every queued payload, in queue order."""
        # Cleared before taking: a put that still saw it set had queued its item already.
        self._drain_scheduled = False
        queue = self._queue
        # What is queued now, not what comes meanwhile: a thread that keeps putting cannot
        # keep the loop here (its items are the next drain's).
        popleft = queue.popleft
        batch = [popleft() for _ in range(len(queue))]
        if not start_all(batch):
            # Some future was cancelled (or is waited on) before it was handed over: ask
            # each one left; a cancelled one is never submitted.
            batch = [
                pair
                for pair in batch
                if pair[1].running() or pair[1].set_running_or_notify_cancel()
            ]
        submit = self._submit
        for item, future in batch:
            if type(item) is list:
                self._submit_many(item, future)
                continue
            try:
                submit(item, future)
            except Exception as exc:
                future.set_exception(exc)

    def _submit_many(self, payloads: list[Any], future: LightFuture[Any]) -> None:
        sinks: BatchSinks[R] = BatchSinks(len(payloads), future)
        submit = self._submit
        for index, payload in enumerate(payloads):
            try:
                submit(payload, sinks.slot(index))
            except Exception as exc:
                sinks.fail(exc)
                return


__all__ = ["Handoff", "LoopThread", "SyncContext", "name_os_thread"]

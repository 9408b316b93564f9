"""A deterministic asyncio event loop on virtual time.

``SimLoop.time()`` is a virtual clock. The loop's "selector" never blocks and never does
I/O: when no callback is ready it jumps the clock straight to the next timer, so a
scenario that waits ten virtual minutes for a timeout costs microseconds. Everything runs
on one thread and every random choice of the simulator comes from one seeded
``random.Random``, so a seed names exactly one schedule: running it twice gives the same
trace.

When nothing is ready and no timer is pending, every task waits on something that can
never happen; the loop raises :class:`SimDeadlock` instead of hanging.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import contextlib
import dataclasses
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


MIN_TICK_S = 1e-6
"""The clock moves at least this much whenever the loop waits for a timer."""
CPU_TICK_S = 1e-9
"""The clock moves this much per loop iteration that runs callbacks."""


class SimDeadlock(RuntimeError):
    """No callback is ready and no timer is pending: every task is stuck."""


class SimStepLimit(RuntimeError):
    """The loop ran more iterations than allowed (a livelock, or a runaway scenario)."""


Event = tuple[float, str, tuple[Any, ...]]
"""One trace event: virtual time, %-format and its arguments (formatted only to print)."""


@dataclasses.dataclass
class Trace:
    """The event log of one schedule, in order.

    Events keep their format and arguments apart: thousands of schedules are run for every
    one that is printed, so formatting waits until a trace is shown.
    """

    events: list[Event] = dataclasses.field(default_factory=list)
    loop: SimLoop | None = None

    def log(self, text: str, *args: Any) -> None:
        """Append one event (``text % args``) stamped with the loop's virtual time."""
        now = self.loop.time() if self.loop is not None else 0.0
        self.events.append((now, text, args))

    def render(self, last: int | None = None) -> str:
        """The trace as text, one event per line (the last ``last`` events if given)."""
        return render_events(self.events, last)


def render_events(events: list[Event], last: int | None = None) -> str:
    """Events as text lines ``time  text`` (the last ``last`` of them when given)."""
    shown = events if last is None else events[-last:]
    skipped = len(events) - len(shown)
    lines = [f"... {skipped} earlier events"] if skipped else []
    lines += [f"{t:12.6f}  {text % args if args else text}" for t, text, args in shown]
    return "\n".join(lines)


class _VirtualSelector:
    """Stands where asyncio expects a selector: ``select(timeout)`` advances the clock."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        loop = self._loop
        loop.steps += 1
        if loop.steps > loop.max_steps:
            raise SimStepLimit(f"more than {loop.max_steps} loop iterations")
        if timeout is None:
            raise SimDeadlock("no ready callback and no pending timer")
        if not loop._ready:  # type: ignore[attr-defined]
            loop.wake_burst_waiters()
            # Jump to the next timer. A real clock always moves on, at least a tick: without
            # that, code that re-arms a timer for "the rest of the delay" (computed as a
            # float difference) could spin at one instant forever.
            loop.advance(max(timeout, MIN_TICK_S))
        else:
            # Running callbacks takes time too; code that loops until a deadline with
            # awaits that complete at once (a float-epsilon of time left) must see it pass.
            loop.advance(CPU_TICK_S)
        return []

    def close(self) -> None:
        pass


class _SimFuture(asyncio.Future[Any]):
    """A future whose hash is its creation number on the loop, not its address: sets of
    futures (``asyncio.wait`` hands them out) then iterate in the same order every run."""

    def __init__(self, *, loop: SimLoop) -> None:
        self._sim_number = loop.next_number()  # before __init__, which may hash it
        super().__init__(loop=loop)

    def __hash__(self) -> int:
        return self._sim_number


class _SimTask(asyncio.Task[Any]):
    """A task with a deterministic hash (see :class:`_SimFuture`)."""

    def __init__(self, coro: Any, *, loop: SimLoop, context: Any = None) -> None:
        self._sim_number = loop.next_number()  # before __init__, which may hash it
        super().__init__(coro, loop=loop, context=context)

    def __hash__(self) -> int:
        return self._sim_number


def _task_factory(loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> Any:
    assert isinstance(loop, SimLoop)
    task = _SimTask(coro, loop=loop, context=context)
    # Held until done: a task that waits forever (on a crashed bookie's journal, say) would
    # otherwise be collected at a moment the garbage collector picks, which is not
    # deterministic and would show in the trace.
    loop.live_tasks.add(task)
    task.add_done_callback(loop.live_tasks.discard)
    return task


class SimLoop(asyncio.base_events.BaseEventLoop):
    """An asyncio loop with virtual time and no I/O (see the module docstring).

    Args:
        seed: seeds :attr:`rng`, the only source of randomness of a simulation.
        max_steps: loop iterations allowed before :class:`SimStepLimit`.
    """

    def __init__(self, seed: int, *, max_steps: int = 2_000_000) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.seed = seed
        self.max_steps = max_steps
        self.steps = 0
        self._now = 0.0
        self._selector = _VirtualSelector(self)
        self._clock_resolution = 1e-9
        self.trace = Trace(loop=self)
        self.set_exception_handler(_log_unhandled)
        self.set_task_factory(_task_factory)
        self._numbers = 0
        self.live_tasks: set[asyncio.Task[Any]] = set()
        self._burst_waiters: list[asyncio.Future[None]] = []
        self.unretrieved: list[str] = []
        """Exceptions of tasks and futures freed unretrieved: reported when the garbage
        collector frees them, at a moment no seed decides, so kept out of :attr:`trace`."""

    def next_number(self) -> int:
        """A fresh number for a future or task made on this loop (deterministic hashes)."""
        self._numbers += 1
        return self._numbers

    def create_future(self) -> asyncio.Future[Any]:
        """A future with a deterministic hash."""
        return _SimFuture(loop=self)

    def next_burst(self) -> asyncio.Future[None]:
        """A future done just before the next timer's callbacks run (a message arriving, a
        timeout, a disk finishing): whatever follows it runs in the loop iterations after."""
        waiter: asyncio.Future[None] = self.create_future()
        self._burst_waiters.append(waiter)
        return waiter

    def wake_burst_waiters(self) -> None:
        """Called as the clock jumps to the next timer: resolve :meth:`next_burst`'s
        futures (their tasks run first in the iteration that runs the timer's callbacks)."""
        waiters, self._burst_waiters = self._burst_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def time(self) -> float:
        """The virtual clock, in seconds since the loop was made."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the virtual clock forward."""
        self._now += seconds

    # BaseEventLoop hooks for a selector loop; there is no I/O and a single thread.
    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def close(self) -> None:
        super().close()
        self._selector.close()


def _log_unhandled(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Unretrieved task exceptions and the like go into the trace, not to stderr."""
    exc = context.get("exception")
    detail = f"{type(exc).__name__}: {exc}" if exc is not None else ""
    if not isinstance(loop, SimLoop):
        return
    message = f"loop: {context.get('message', '')} {detail}"
    if "never retrieved" in message:
        loop.unretrieved.append(message)  # from a finaliser: when is up to the collector
    else:
        loop.trace.log(message)


def run(
    coro: Coroutine[Any, Any, T], seed: int, *, max_steps: int = 2_000_000
) -> tuple[T, SimLoop]:
    """Run ``coro`` to completion on a fresh :class:`SimLoop`; return its result and loop.

    Tasks still pending afterwards are cancelled and drained, as ``asyncio.run`` does.
    """
    loop = SimLoop(seed, max_steps=max_steps)
    try:
        asyncio.set_event_loop(loop)
        result = loop.run_until_complete(coro)
        return result, loop
    finally:
        try:
            _cancel_all(loop)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all(loop: SimLoop) -> None:
    """Cancel every pending task and let them unwind (a few rounds: cancelled tasks may
    start others in their cleanup)."""
    for _ in range(5):
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not pending:
            return
        for task in pending:
            task.cancel()
        loop.max_steps = loop.steps + 100_000
        with contextlib.suppress(SimDeadlock, SimStepLimit):
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

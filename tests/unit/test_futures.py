"""The futures of the sync facades (walog._futures.LightFuture): a concurrent.futures.Future
in every way its users can tell, settled without a lock by the loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import _base as futures_base  # what concurrent.futures.wait() runs
from types import FrameType
from typing import Any

import pytest

from walog._futures import LightFuture, start_all


def _started(count: int) -> list[LightFuture[int]]:
    futures: list[LightFuture[int]] = [LightFuture() for _ in range(count)]
    assert start_all([(None, f) for f in futures])
    return futures


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads as often as the interpreter can: the races below get every chance."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


class PausedSettler:
    """Runs ``future.set_result(value)`` in a thread of its own and stops it just before
    the line of ``set_result`` that contains ``line``, until :meth:`resume`: another thread
    can then do what it likes at exactly that point of the settling."""

    def __init__(self, future: LightFuture[int], value: int, line: str) -> None:
        lines, first = inspect.getsourcelines(LightFuture.set_result)
        matches = [first + i for i, text in enumerate(lines) if line in text]
        assert len(matches) == 1, f"{line!r} is not one line of LightFuture.set_result"
        self._line = matches[0]
        self._code = LightFuture.set_result.__code__
        self.reached = threading.Event()
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(future, value))
        self._thread.start()
        assert self.reached.wait(30), "the settling never reached the line"

    def _run(self, future: LightFuture[int], value: int) -> None:
        sys.settrace(self._trace)
        try:
            future.set_result(value)
        finally:
            sys.settrace(None)

    def _trace(self, frame: FrameType, event: str, _: Any) -> Callable[..., Any] | None:
        if event == "call" and frame.f_code is self._code:
            return self._step
        return None

    def _step(self, frame: FrameType, event: str, _: Any) -> Callable[..., Any]:
        if event == "line" and frame.f_lineno == self._line:
            self.reached.set()
            self._go.wait(30)
        return self._step

    def resume(self) -> None:
        """Let the settling finish and wait until it has."""
        self._go.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def test_a_waiter_that_comes_while_the_loop_settles_is_told() -> None:
    (future,) = _started(1)
    calls: list[object] = []
    # The result is written, FINISHED not yet: a thread that waits now finds it running.
    settler = PausedSettler(future, 9, "self._raw = FINISHED")
    with pytest.raises(TimeoutError):
        future.exception(timeout=0)  # it has its condition now
    future.add_done_callback(calls.append)
    assert calls == []
    settler.resume()
    done, not_done = concurrent.futures.wait([future], timeout=0)
    assert done == {future} and not not_done, "the settling was not told under the condition"
    assert calls == [future]
    assert future.result(timeout=0) == 9


def test_a_waiter_that_comes_after_the_loop_settled_is_told_once() -> None:
    future, other = _started(2)
    # FINISHED is written, the loop has not looked for waiters yet: a wait() now counts the
    # future done, and must not hear of it once more (its count would end the wait early).
    settler = PausedSettler(future, 4, "if self._slow is None:")
    calls: list[object] = []
    future.add_done_callback(calls.append)
    assert calls == [future], "a settled future runs a callback at once"
    with futures_base._AcquireFutures([future, other]):
        waiter = futures_base._create_and_install_waiters(  # type: ignore[attr-defined]
            [future, other], futures_base.ALL_COMPLETED
        )
    settler.resume()
    assert not waiter.event.is_set(), "the settling was told twice: wait() would end early"
    other.set_result(5)
    assert waiter.event.is_set()
    assert calls == [future]


def test_a_light_future_is_a_concurrent_future_through_its_life() -> None:
    future: LightFuture[int] = LightFuture()
    assert isinstance(future, concurrent.futures.Future)
    assert not future.done() and not future.running() and not future.cancelled()
    assert "state=pending" in repr(future)
    assert future.set_running_or_notify_cancel()
    assert future.running() and not future.done()
    with pytest.raises(TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        future.exception(timeout=0)
    assert not future.cancel(), "a future handed over cannot be cancelled"
    future.set_result(7)
    assert future.done() and not future.running() and future.result() == 7
    assert future.exception() is None
    assert "returned int" in repr(future)


def test_a_failed_light_future_raises_its_exception_each_time() -> None:
    (future,) = _started(1)
    error = KeyError("gone")
    future.set_exception(error)
    for _ in range(2):
        with pytest.raises(KeyError) as raised:
            future.result()
        assert raised.value is error
    assert future.exception() is error
    assert "raised KeyError" in repr(future)


def test_a_light_future_is_settled_at_most_once() -> None:
    settled, failed, cancelled = [*_started(2), LightFuture[int]()]
    settled.set_result(1)
    failed.set_exception(ValueError("first"))
    assert cancelled.cancel()
    for future in (settled, failed, cancelled):
        with pytest.raises(concurrent.futures.InvalidStateError):
            future.set_result(2)
        with pytest.raises(concurrent.futures.InvalidStateError):
            future.set_exception(ValueError("second"))
    assert settled.result() == 1
    with pytest.raises(ValueError, match="first"):
        failed.result()
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled.result()


def test_a_future_cancelled_before_the_hand_over_is_never_started() -> None:
    future: LightFuture[int] = LightFuture()
    calls: list[object] = []
    future.add_done_callback(calls.append)
    assert future.cancel() and future.cancel()
    assert future.cancelled() and future.done()
    assert calls == [future]
    assert not start_all([(None, future)])
    assert not future.set_running_or_notify_cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=0)
    with pytest.raises(concurrent.futures.CancelledError):
        future.exception()
    with pytest.raises(RuntimeError, match="unexpected state"):
        future.set_running_or_notify_cancel()


def test_a_future_waited_on_before_the_hand_over_is_started_one_by_one() -> None:
    waited, plain = LightFuture[int](), LightFuture[int]()
    with pytest.raises(TimeoutError):
        waited.result(timeout=0)  # it has its condition now
    assert not start_all([(None, waited), (None, plain)])
    assert plain.running() and not waited.running()
    assert waited.set_running_or_notify_cancel() and waited.running()
    waited.set_result(3)
    assert waited.result(timeout=0) == 3


def test_callbacks_run_once_each_in_the_order_added() -> None:
    (future,) = _started(1)
    calls: list[str] = []
    future.add_done_callback(lambda f: calls.append(f"a{f.result()}"))
    future.add_done_callback(lambda f: calls.append(f"b{f.result()}"))
    future.set_result(1)
    future.add_done_callback(lambda f: calls.append(f"c{f.result()}"))  # now: runs at once
    assert calls == ["a1", "b1", "c1"]


def test_a_failing_callback_is_logged_and_the_next_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    (future,) = _started(1)
    calls: list[int] = []

    def boom(_: object) -> None:
        raise RuntimeError("callback failed")

    future.add_done_callback(boom)
    future.add_done_callback(lambda f: calls.append(1))
    future.set_result(0)
    assert calls == [1]
    assert "exception calling callback" in caplog.text


def test_concurrent_futures_wait_and_as_completed_take_light_futures() -> None:
    futures = _started(3)
    mixed: list[concurrent.futures.Future[int]] = [*futures, concurrent.futures.Future()]
    mixed[3].set_result(3)
    done, not_done = concurrent.futures.wait(mixed, timeout=0)
    assert done == {mixed[3]} and not_done == set(futures)
    futures[0].set_result(0)
    done, _ = concurrent.futures.wait(mixed, return_when=concurrent.futures.FIRST_COMPLETED)
    assert futures[0] in done
    threading.Timer(0.01, futures[2].set_exception, (ValueError("x"),)).start()
    done, _ = concurrent.futures.wait(
        futures, timeout=30, return_when=concurrent.futures.FIRST_EXCEPTION
    )
    assert futures[2] in done
    futures[1].set_result(1)
    assert set(concurrent.futures.as_completed(mixed, timeout=30)) == set(mixed)


def test_asyncio_wraps_a_light_future() -> None:
    (future,) = _started(1)

    async def wait() -> int:
        return await asyncio.wrap_future(future)

    threading.Timer(0.01, future.set_result, (5,)).start()
    assert asyncio.run(wait()) == 5


def _settle_while_others_wait() -> list[str]:
    """One round: the loop settles 300 started futures without a lock while other threads
    make their conditions (blocked result() calls, callbacks, a wait() for a hundred);
    return what went wrong."""
    futures = _started(300)
    calls = [0] * len(futures)
    failures: list[str] = []

    def settle() -> None:
        for index, future in enumerate(futures):
            if index % 7 == 0:
                future.set_exception(ValueError(str(index)))
            else:
                future.set_result(index)

    def count(index: int) -> Callable[[object], None]:
        def called(_: object) -> None:
            calls[index] += 1

        return called

    def wait_all() -> None:
        done, not_done = concurrent.futures.wait(futures[100:200], timeout=30)
        if not_done or not all(f.done() for f in done):
            failures.append(f"wait() returned with {len(not_done)} not done")

    def read_back() -> None:
        for index in reversed(range(200, 300)):
            try:
                if futures[index].result(timeout=30) != index:
                    failures.append(f"future {index} has another result")
            except ValueError:
                pass

    settler = threading.Thread(target=settle)
    helpers = [threading.Thread(target=wait_all), threading.Thread(target=read_back)]
    for thread in helpers:
        thread.start()
    settler.start()
    for index in range(100):
        futures[index].add_done_callback(count(index))
    for thread in (settler, *helpers):
        thread.join(timeout=60)
    if calls[:100] != [1] * 100:
        failures.append(f"callbacks ran {sorted(set(calls[:100]))} times")
    if not all(f.done() for f in futures):
        failures.append("a future was left unsettled")
    return failures


def test_a_waiter_never_misses_the_settling_of_its_future(busy_switching: None) -> None:
    for _ in range(20):
        assert _settle_while_others_wait() == []


def _cancel_while_handed_over() -> tuple[list[LightFuture[int]], list[bool], list[bool]]:
    """One round: 300 futures are cancelled while the loop hands them over as
    Handoff.drain does (start all, ask the others one by one); return the futures, what
    each cancel() answered and what the loop's one-by-one starts answered."""
    futures: list[LightFuture[int]] = [LightFuture() for _ in range(300)]
    pairs = [(None, f) for f in futures]
    started: list[bool] = []

    def hand_over() -> None:
        if not start_all(pairs):
            for _, future in pairs:
                if not future.running():
                    started.append(future.set_running_or_notify_cancel())

    loop = threading.Thread(target=hand_over)
    loop.start()
    cancelled = [future.cancel() for future in futures]
    loop.join(timeout=60)
    return futures, cancelled, started


def test_cancelling_races_the_hand_over_and_one_of_them_wins(busy_switching: None) -> None:
    for _ in range(20):
        futures, cancelled, started = _cancel_while_handed_over()
        for future, was_cancelled in zip(futures, cancelled, strict=True):
            assert future.cancelled() == was_cancelled
            assert future.running() != was_cancelled
        assert started.count(False) == sum(cancelled)

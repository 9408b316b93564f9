"""The event-loop thread behind the sync facades (walog._loop_thread)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from walog._loop_thread import LoopThread


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread(name="walog-test-loop")
    yield thread
    thread.stop()


def test_run_returns_the_coroutine_result_from_the_loop_thread(loop_thread: LoopThread) -> None:
    async def where() -> str:
        return threading.current_thread().name

    assert loop_thread.run(where()) == "walog-test-loop"


def test_run_raises_the_coroutine_error(loop_thread: LoopThread) -> None:
    async def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        loop_thread.run(boom())


def test_run_times_out_and_cancels(loop_thread: LoopThread) -> None:
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    with pytest.raises(TimeoutError):
        loop_thread.run(forever(), timeout=0.05)
    assert cancelled.wait(10)


def test_sync_call_from_the_loop_thread_is_refused_not_deadlocked(loop_thread: LoopThread) -> None:
    async def nested() -> None:
        async def inner() -> int:
            return 1

        loop_thread.run(inner())

    with pytest.raises(RuntimeError, match=r"walog\.aio"):
        loop_thread.run(nested())


def test_instance_is_one_loop_per_process() -> None:
    assert LoopThread.instance() is LoopThread.instance()
    assert LoopThread.instance().is_alive()


def test_an_operations_own_timeout_error_reaches_the_caller_unchanged(
    loop_thread: LoopThread,
) -> None:
    async def gives_up() -> None:
        raise TimeoutError("the leader did not answer within 1 seconds")

    with pytest.raises(TimeoutError, match=r"^the leader did not answer within 1 seconds$"):
        loop_thread.run(gives_up())
    with pytest.raises(TimeoutError, match=r"^the leader did not answer within 1 seconds$"):
        loop_thread.run(gives_up(), timeout=30)

    async def slow() -> None:
        await asyncio.sleep(30)

    with pytest.raises(TimeoutError, match=r"^operation did not finish within 0\.05 seconds$"):
        loop_thread.run(slow(), timeout=0.05)

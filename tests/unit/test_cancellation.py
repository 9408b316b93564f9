"""Stopping a task never swallows a cancellation of the stopping task (walog/_tasks.py).

The rule, and a scan of the code that refuses the pattern that breaks it:
``suppress(CancelledError)`` around an ``await`` (or an ``except CancelledError`` that
does not re-raise after awaiting) takes the caller's own cancellation for the task's.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from walog import mutations
from walog._tasks import cancel_and_wait

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("walog", "bookie")


async def _slow_to_stop(stopping: asyncio.Event, release: asyncio.Event) -> None:
    """A task that takes a while to wind down once cancelled (it cleans up)."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        stopping.set()
        await release.wait()
        raise


async def test_cancel_and_wait_absorbs_only_the_tasks_own_cancellation() -> None:
    task = asyncio.create_task(asyncio.sleep(10))
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()


async def test_a_caller_cancelled_while_it_stops_a_task_is_cancelled_once_the_task_ended() -> None:
    stopping, release = asyncio.Event(), asyncio.Event()
    child = asyncio.create_task(_slow_to_stop(stopping, release))
    await asyncio.sleep(0)
    after: list[str] = []

    async def stopper() -> None:
        await cancel_and_wait(child)
        after.append("went on as if not cancelled")

    outer = asyncio.create_task(stopper())
    await stopping.wait()  # the child is winding down; the stopper waits for it
    outer.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert child.cancelled()
    assert after == []


async def test_a_caller_already_being_cancelled_finishes_its_cleanup_after_stopping_a_task() -> (
    None
):
    # As a state machine's step-down does: cancelled while leading, it stops its election
    # monitor in a finally and must still remove its election record after that.
    cleaned: list[str] = []

    async def leader() -> None:
        monitor = asyncio.create_task(asyncio.sleep(10))
        try:
            await asyncio.sleep(10)
        finally:
            await cancel_and_wait(monitor)
            cleaned.append("record removed")

    task = asyncio.create_task(leader())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()
    assert cleaned == ["record removed"]


async def test_cancel_and_wait_raises_what_a_task_raised_after_stopping_the_others() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    failing = asyncio.create_task(fails_on_cancel())
    other = asyncio.create_task(asyncio.sleep(10))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(failing, other)
    assert other.cancelled()


async def test_the_mutation_swallows_the_callers_cancellation() -> None:
    """``stop_swallows_own_cancel`` is the old pattern; the simulator must catch it."""
    stopping, release = asyncio.Event(), asyncio.Event()
    child = asyncio.create_task(_slow_to_stop(stopping, release))
    await asyncio.sleep(0)

    async def stopper() -> str:
        await cancel_and_wait(child)
        return "went on"

    with mutations.enabled_mutations("stop_swallows_own_cancel"):
        outer = asyncio.create_task(stopper())
        await stopping.wait()
        outer.cancel()
        await asyncio.sleep(0)
        release.set()
        assert await outer == "went on"


def _names_cancelled_error(node: ast.expr) -> bool:
    return any(
        isinstance(sub, (ast.Attribute, ast.Name))
        and (sub.attr if isinstance(sub, ast.Attribute) else sub.id) == "CancelledError"
        for sub in ast.walk(node)
    )


def _awaits(body: list[ast.stmt]) -> bool:
    return any(isinstance(sub, ast.Await) for stmt in body for sub in ast.walk(stmt))


def _swallowing_sites(tree: ast.AST) -> list[int]:
    """Lines where a CancelledError raised by an ``await`` is suppressed."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call = item.context_expr
                if (
                    isinstance(call, ast.Call)
                    and getattr(call.func, "attr", getattr(call.func, "id", "")) == "suppress"
                    and any(_names_cancelled_error(arg) for arg in call.args)
                    and _awaits(node.body)
                ):
                    found.append(node.lineno)
    return found


def test_no_code_suppresses_a_cancelled_error_around_an_await() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            offenders += [f"{path.relative_to(ROOT)}:{line}" for line in _swallowing_sites(tree)]
    assert not offenders, (
        "suppress(CancelledError) around an await swallows the caller's own cancellation; "
        f"use walog._tasks.cancel_and_wait: {offenders}"
    )


def test_the_scan_finds_the_pattern() -> None:
    source = (
        "async def stop(task):\n"
        "    task.cancel()\n"
        "    with contextlib.suppress(asyncio.CancelledError):\n"
        "        await task\n"
    )
    assert _swallowing_sites(ast.parse(source)) == [3]

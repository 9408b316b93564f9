"""Reads of a state machine node's local state (docs/linearizable-reads.md).

A ``"stale"`` read runs the caller's function on the node's state at once: fast, and on a
standby (or a leader that lost its term without knowing yet) it may miss commands other
nodes already answered.

A ``"linearizable"`` read first takes the log's read barrier (walog.log.barrier: a position
past every record acknowledged before the read began, found without fencing and without
asking the leader), then waits until the node applied every record before it. Every
command whose answer reached anyone before the read began is then in the state, so the
read sees the latest completed write, on any node: leader or standby.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

from walog.log.async_log import AsyncLog
from walog.log.position import Position

T = TypeVar("T")

Consistency = Literal["linearizable", "stale"]
"""How fresh a read of a node's state must be."""
CONSISTENCIES: tuple[Consistency, ...] = ("linearizable", "stale")


class _Node(Protocol):
    """What a read needs of its node (an ``AsyncStateMachine``)."""

    @property
    def applied_position(self) -> Position | None: ...

    async def wait_for(self, check: Callable[[], bool], timeout: float | None = None) -> None: ...  # noqa: ASYNC109


def reached(applied: Position | None, barrier: Position) -> bool:
    """True when a state that holds every record before ``applied`` (None: nothing applied
    yet) holds every record before ``barrier``."""
    if applied is None:
        return barrier == Position(0, 0, 0)
    return applied >= barrier


def check_consistency(consistency: object) -> Consistency:
    """``consistency`` if it is one this module knows.

    Raises:
        ValueError: anything else (the message lists the choices).
    """
    if consistency == "linearizable":
        return "linearizable"
    if consistency == "stale":
        return "stale"
    raise ValueError(
        f"consistency must be one of {', '.join(map(repr, CONSISTENCIES))}, got {consistency!r}"
    )


async def read_state(
    log: AsyncLog,
    node: _Node,
    state: Any,
    fn: Callable[[Any], T],
    consistency: Consistency,
    timeout: float,  # noqa: ASYNC109
) -> T:
    """Run ``fn(state)`` on ``node`` (a state machine over ``log``) once its state is as
    fresh as ``consistency`` asks (see ``AsyncStateMachine.read``).

    Raises:
        ValueError: an unknown ``consistency``, or a negative ``timeout``.
        TimeoutError: the barrier or the node's applying it took longer than ``timeout``.
    """
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
    if check_consistency(consistency) == "stale":
        return fn(state)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    barrier = await log.read_barrier(timeout=timeout)
    remaining = max(0.0, deadline - loop.time())
    await node.wait_for(lambda: reached(node.applied_position, barrier), remaining)
    return fn(state)


__all__ = ["CONSISTENCIES", "Consistency", "check_consistency", "reached", "read_state"]

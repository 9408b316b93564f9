"""A Wing-Gong linearizability checker for a single register, for tests.

A history is a list of :class:`Op`: each a write of a value or a read that returned one,
with the time it was invoked and the time its answer came back. An operation whose outcome
is unknown (a write whose answer was lost: it may or may not have taken effect) has no
response time: it may take effect at any moment after its invocation, or never (placed
last, after everything, it changes nothing any read saw). Reads whose answer never came
are left out: they observed nothing.

The history is linearizable when some total order of the operations respects real time
(an operation that answered before another was invoked comes first) and is a legal
sequence of the register: each read returns the latest write before it (the initial value
before any). :func:`check` searches for one, Wing & Gong's way with Lowe's memo of
``(operations placed, register value)`` pairs already explored, and returns None or the
reason it found none.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from typing import Literal


@dataclasses.dataclass(frozen=True)
class Op:
    """One operation of a history.

    Attributes:
        kind: ``"write"`` or ``"read"``.
        value: the value written, or the value the read returned.
        invoke: when the operation was invoked.
        response: when its answer came back; None: never (a write of unknown outcome).
        who: who invoked it (for the report).
    """

    kind: Literal["write", "read"]
    value: Hashable
    invoke: float
    response: float | None
    who: str = ""

    @property
    def end(self) -> float:
        """The response time, infinite for an operation of unknown outcome."""
        return math.inf if self.response is None else self.response

    def __str__(self) -> str:
        end = "?" if self.response is None else f"{self.response:.4f}"
        return f"{self.who} {self.kind}({self.value!r}) [{self.invoke:.4f}, {end}]"


MAX_STATES = 2_000_000
"""Explored (placed set, value) pairs at most before the search gives up."""


class SearchTooLarge(Exception):
    """The history is too large for the search's bounds (not a verdict)."""


def check(history: Sequence[Op], initial: Hashable = None) -> str | None:
    """None when ``history`` is linearizable for a register starting at ``initial``,
    otherwise why not (the operations that could not be placed).

    Raises:
        ValueError: a read of unknown outcome, or a response before its invocation.
        SearchTooLarge: the search met :data:`MAX_STATES` states.
    """
    for op in history:
        if op.kind == "read" and op.response is None:
            raise ValueError(f"a read without an answer observed nothing; leave it out: {op}")
        if op.response is not None and op.response < op.invoke:
            raise ValueError(f"answered before it was invoked: {op}")
    ops = sorted(history, key=lambda o: (o.invoke, o.end))
    n = len(ops)
    full = (1 << n) - 1
    seen: set[tuple[int, Hashable]] = set()
    best: tuple[int, int] = (0, 0)  # (operations placed, that set) of the deepest path
    # Depth-first: a stack of (placed set, register value).
    stack: list[tuple[int, Hashable]] = [(0, initial)]
    while stack:
        placed, value = stack.pop()
        if placed == full:
            return None
        key = (placed, value)
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > MAX_STATES:
            raise SearchTooLarge(f"more than {MAX_STATES} states for {n} operations")
        count = bin(placed).count("1")
        if count > best[0]:
            best = (count, placed)
        # An operation can go next only if no unplaced one answered before it began. In
        # invocation order, an operation invoked after the earliest answer seen so far can
        # neither go next nor answer earlier, so the scan stops there.
        first = ((placed + 1) & ~placed).bit_length() - 1  # the lowest unplaced index
        horizon = math.inf
        window: list[int] = []
        for i in range(first, n):
            op = ops[i]
            if op.invoke > horizon:
                break
            if not placed >> i & 1:
                window.append(i)
                horizon = min(horizon, op.end)
        for i in reversed(window):  # the earliest invoked is tried first
            op = ops[i]
            if op.invoke > horizon:
                continue
            if op.kind == "write":
                stack.append((placed | 1 << i, op.value))
            elif op.value == value:
                stack.append((placed | 1 << i, value))
    placed = best[1]
    left = [ops[i] for i in range(n) if not placed >> i & 1]
    horizon = min(o.end for o in left)
    stuck = [o for o in left if o.invoke <= horizon]
    return (
        f"not linearizable: after placing {best[0]} of {n} operations none of "
        + "; ".join(str(o) for o in stuck[:6])
        + " can come next"
    )


__all__ = ["MAX_STATES", "Op", "SearchTooLarge", "check"]

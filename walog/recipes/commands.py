"""The leader's commands in flight: appended to the log, then applied in append order as
their records are acknowledged, and answered with what ``apply`` returned.

The log writer acknowledges a prefix of what was appended, so applying in append order is
applying in log order, and once one append fails every later one in flight fails too:
none of them is applied here (a standby applies whichever of them the log kept).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from walog._sinks import Sink
from walog.log.position import Position, Record

ResultSink = Sink[Any]
"""Where a command's result goes: an asyncio future, or the sync facade's own future."""
Applier = Callable[[Record], tuple[Any, BaseException | None]]
"""Applies one record; returns ``apply``'s result or the exception it raised."""


@dataclasses.dataclass(slots=True)
class _Pending:
    ack: asyncio.Future[Position]
    command: bytes
    sink: ResultSink
    submitted: float
    key: tuple[str, int] | None  # the command's (client, seq), when it has one


def settle(sink: ResultSink, value: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``sink`` with ``value`` or ``error`` unless it is already resolved."""
    if sink.done():
        return
    if error is not None:
        sink.set_exception(error)
    else:
        sink.set_result(value)


class CommandPipeline:
    """Commands appended by a leader, applied and answered in append order (loop thread).

    Args:
        apply: applies one record (the state machine's exactly-once apply).
        on_idle: called whenever nothing is left in flight.
    """

    def __init__(self, apply: Applier, on_idle: Callable[[], None]) -> None:
        self._apply = apply
        self._on_idle = on_idle
        self._pending: collections.deque[_Pending] = collections.deque()
        self._kick = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._pending)

    def add(
        self,
        ack: asyncio.Future[Position],
        command: bytes,
        sink: ResultSink,
        key: tuple[str, int] | None = None,
    ) -> None:
        """A command whose record was appended; ``ack`` resolves with its position (the
        first one, for a retried ``key``: its record is not written again)."""
        self._pending.append(_Pending(ack, command, sink, time.time(), key))
        self._idle.clear()
        self._kick.set()

    async def run(self) -> None:
        """Apply commands as they are acknowledged until an append fails (then raise it)."""
        pending = self._pending
        while True:
            if not pending:
                self._kick.clear()
                await self._kick.wait()
                continue
            head = pending[0]
            try:
                position = await head.ack
            except Exception as exc:
                # Acks are a prefix: this one and every later one failed, none is applied.
                while pending:
                    settle(pending.popleft().sink, error=exc)
                self._went_idle()
                raise
            pending.popleft()
            # The leader's own record: the log holds exactly these bytes at ``position``.
            producer, seq = head.key if head.key is not None else (None, None)
            record = Record(position, head.command, head.submitted, producer, seq)
            result, error = self._apply(record)
            settle(head.sink, result, error)
            if not pending:
                self._went_idle()

    async def drain(self) -> None:
        """Wait until nothing is in flight (every command applied or failed)."""
        await self._idle.wait()

    def fail_all(self, error: BaseException) -> None:
        """Answer every command still in flight with ``error`` and forget them."""
        while self._pending:
            settle(self._pending.popleft().sink, error=error)
        self._went_idle()

    def _went_idle(self) -> None:
        self._idle.set()
        self._on_idle()


__all__ = ["Applier", "CommandPipeline", "ResultSink", "settle"]

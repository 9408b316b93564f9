"""The event loop walog starts when it starts one itself: uvloop's when it is installed.

The bookie (``python -m bookie``), the sync facade's loop thread (``walog.connect``), the CLI
and ``walog bench`` run their own loops; :func:`new_event_loop` makes them. uvloop runs the
loop and the socket transports in C, where the native protocol (plain asyncio protocols)
spends much of its time (docs/operations.md has the measurements).
``WALOG_EVENT_LOOP=asyncio`` picks the standard library's loop instead; ``uvloop``, the
default, falls back to it when uvloop is not installed.
Coroutines given to ``walog.aio`` run on whatever loop the application runs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "WALOG_EVENT_LOOP"
"""The environment variable that picks the loop: ``uvloop`` (the default) or ``asyncio``."""


def loop_kind() -> str:
    """``uvloop`` or ``asyncio``: what :func:`new_event_loop` makes here.

    Raises:
        ValueError: ``WALOG_EVENT_LOOP`` names neither.
    """
    wanted = os.environ.get(ENV, "uvloop").strip().lower() or "uvloop"
    if wanted not in ("uvloop", "asyncio"):
        raise ValueError(f"{ENV} must be 'uvloop' or 'asyncio', got {wanted!r}")
    if wanted == "uvloop" and importlib.util.find_spec("uvloop") is None:
        return "asyncio"
    return wanted


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of the kind :func:`loop_kind` names."""
    if loop_kind() == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on a loop from :func:`new_event_loop`."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


__all__ = ["ENV", "loop_kind", "new_event_loop", "run"]

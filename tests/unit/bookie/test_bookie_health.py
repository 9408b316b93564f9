"""What probes learn: draining wins over everything, a bookie is ready once registered, a
read-only bookie is ready for reads only, and liveness needs the event loop to run."""

from __future__ import annotations

import asyncio

import pytest

from bookie.server import health
from bookie.server.health import BookieHealth, BookieState


def _health(
    loop: asyncio.AbstractEventLoop,
    *,
    registered: bool = True,
    draining: bool = False,
    read_only: str | None = None,
) -> BookieHealth:
    return BookieHealth(
        loop,
        is_registered=lambda: registered,
        is_draining=lambda: draining,
        read_only_reason=lambda: read_only,
    )


async def test_state_draining_comes_first_then_starting_then_read_only() -> None:
    loop = asyncio.get_running_loop()
    assert _health(loop, draining=True, read_only="x").state()[0] is BookieState.DRAINING
    assert _health(loop, registered=False, read_only="x").state()[0] is BookieState.STARTING
    assert _health(loop, read_only="journal failed").state() == (
        BookieState.READ_ONLY,
        "read-only: journal failed",
    )
    assert _health(loop).state() == (BookieState.WRITABLE, "writable")


async def test_a_read_only_bookie_is_ready_for_reads_but_not_for_writes() -> None:
    probe = _health(asyncio.get_running_loop(), read_only="disk full")
    assert probe.ready() == (True, "read-only: disk full")
    assert probe.ready(writes=True) == (False, "read-only: disk full")
    starting = _health(asyncio.get_running_loop(), registered=False)
    assert starting.ready()[0] is False


async def test_liveness_needs_the_event_loop_to_run_a_callback() -> None:
    running = _health(asyncio.get_running_loop())
    assert await asyncio.to_thread(running.alive) == (True, "alive")


def test_liveness_fails_when_the_event_loop_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "LOOP_PROBE_TIMEOUT_S", 0.05)
    idle = asyncio.new_event_loop()  # never run: like a loop stuck in a long callback
    try:
        ok, why = _health(idle).alive()
    finally:
        idle.close()
    assert not ok and "event loop ran no callback" in why
    closed = asyncio.new_event_loop()
    closed.close()
    assert _health(closed).alive() == (False, "event loop closed")

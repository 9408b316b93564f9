"""Which event loop walog starts: uvloop's when installed, the standard one on request, one
clear error for anything else (walog/_loop.py)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from walog import _loop


async def _kind() -> str:
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


def test_walog_runs_its_own_loops_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_loop.ENV, raising=False)
    assert _loop.loop_kind() == "uvloop"
    assert _loop.run(_kind()) == "uvloop"
    loop = _loop.new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_walog_event_loop_asyncio_picks_the_standard_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_loop.ENV, "asyncio")
    assert _loop.run(_kind()) == "asyncio"


def test_an_unknown_walog_event_loop_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_loop.ENV, "trio")
    with pytest.raises(
        ValueError, match="WALOG_EVENT_LOOP must be 'uvloop' or 'asyncio', got 'trio'"
    ):
        _loop.new_event_loop()

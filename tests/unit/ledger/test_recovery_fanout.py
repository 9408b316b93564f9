"""Fan-out rules of recovery requests: stop at the quorum rule, unknowns as answers, and the
staggered start that asks the rest of a write set only when needed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from walog.errors import BookieUnavailableError, UnauthorizedError
from walog.ledger.readops import Outcome, fan_out, fan_out_staggered


def _answer(
    value: int, *, after: float = 0.0, log: list[str], name: str
) -> Callable[[], Awaitable[int]]:
    async def call() -> int:
        log.append(f"start {name}")
        await asyncio.sleep(after)
        return value

    return call


async def test_fan_out_stops_once_the_rule_holds_and_cancels_the_rest() -> None:
    slow = asyncio.Event()

    async def never() -> int:
        await slow.wait()
        return 0

    async def fast() -> int:
        return 1

    seen: list[tuple[str, Outcome[int]]] = []

    def on(key: str, outcome: Outcome[int]) -> bool:
        seen.append((key, outcome))
        return outcome == 1

    await asyncio.wait_for(fan_out({"slow": never(), "fast": fast()}, on), 5)
    assert seen == [("fast", 1)]


async def test_fan_out_turns_bookie_errors_into_unknown_outcomes() -> None:
    async def fails() -> int:
        raise BookieUnavailableError("timed out")

    seen: list[Outcome[int]] = []
    await fan_out({"a": fails()}, lambda _k, o: seen.append(o) or False)
    assert len(seen) == 1 and isinstance(seen[0], BookieUnavailableError)


async def test_fan_out_propagates_a_rule_violation_like_unauthorized() -> None:
    async def answer() -> int:
        return 1

    def on(_key: str, _outcome: Outcome[int]) -> bool:
        raise UnauthorizedError("wrong password")

    with pytest.raises(UnauthorizedError):
        await fan_out({"a": answer()}, on)


async def test_staggered_asks_only_the_first_bookie_when_it_settles() -> None:
    log: list[str] = []
    calls = {n: _answer(1, log=log, name=n) for n in ("b1", "b2", "b3")}
    await fan_out_staggered(calls, lambda _k, o: o == 1, delay=30.0)
    assert log == ["start b1"]


async def test_staggered_asks_the_others_at_once_after_an_unsettling_answer() -> None:
    log: list[str] = []
    calls = {
        "b1": _answer(0, log=log, name="b1"),  # e.g. "no such entry": not enough alone
        "b2": _answer(1, log=log, name="b2"),
        "b3": _answer(1, log=log, name="b3", after=0.01),
    }
    loop = asyncio.get_running_loop()
    started = loop.time()
    await fan_out_staggered(calls, lambda _k, o: o == 1, delay=30.0)
    assert loop.time() - started < 10.0  # did not wait for the speculative delay
    assert log[0] == "start b1" and set(log[1:]) == {"start b2", "start b3"}


async def test_staggered_speculates_when_the_first_bookie_is_silent() -> None:
    log: list[str] = []
    calls = {
        "b1": _answer(1, log=log, name="b1", after=60.0),  # a frozen bookie
        "b2": _answer(1, log=log, name="b2"),
    }
    await asyncio.wait_for(fan_out_staggered(calls, lambda _k, o: o == 1, delay=0.05), 10)
    assert log == ["start b1", "start b2"]

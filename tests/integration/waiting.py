"""Waiting for a condition that real processes reach in their own time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_fixed


async def eventually(check: Callable[[], Awaitable[None]], within: float = 15.0) -> None:
    """Retry an async assertion until it holds, for up to ``within`` seconds (then its last
    AssertionError is raised)."""
    async for attempt in AsyncRetrying(
        stop=stop_after_delay(within),
        wait=wait_fixed(0.05),
        retry=retry_if_exception_type(AssertionError),
        reraise=True,
    ):
        with attempt:
            await check()

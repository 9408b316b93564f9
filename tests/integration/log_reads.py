"""Reading a log back whole, for the tests that check nothing was lost or added."""

from __future__ import annotations

from walog.log.async_log import AsyncLog


async def read_exactly(log: AsyncLog, count: int) -> list[bytes]:
    """The first ``count`` records from the start, and nothing after them."""
    reader = await log.open_reader("earliest")
    try:
        records = [await reader.read_next(timeout=30) for _ in range(count)]
        assert await reader.read_next(timeout=0.2) is None
        return [r.data for r in records if r is not None]
    finally:
        await reader.close()

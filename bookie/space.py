"""Reclaiming space under pressure: ledger GC, then compaction, as soon as a disk fills up.

The ledger collector (bookie/gc.py) and the compactor (bookie/storage/compaction.py) run on
their own intervals, a minute and an hour by default. A disk used beyond the warning mark
cannot wait that long: the bookie turns read-only at the next mark, and stays so until the
space of deleted ledgers comes back. The disk monitor (bookie/disks.py) wakes a
:class:`Reclaimer` at every measurement that finds a disk under pressure; it then runs one
pass: a GC scan (deleted ledgers go, and with them every entry log left without live data),
then a compaction at the major threshold (partly dead logs are copied, as BookKeeper's
bookies force a compaction on a nearly full disk), the log being filled included: it is
sealed first when it is partly dead, since on a disk smaller than an entry log it may hold
everything. Passes are at least ``gap_s`` apart, so a
disk that stays full costs one metadata listing per ``gap_s``, not one per measurement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from bookie.storage.journal_files import StorageIOError
from walog.errors import WalogError

_log = structlog.get_logger("bookie.space")


class Reclaimer:
    """Runs ``collect`` then ``compact`` when woken, at most once every ``gap_s``.

    Args:
        collect: one ledger GC scan.
        compact: one compaction pass.
        gap_s: least time from the start of one pass to the start of the next.
    """

    def __init__(
        self,
        collect: Callable[[], Awaitable[object]],
        compact: Callable[[], Awaitable[object]],
        gap_s: float,
    ) -> None:
        self._collect = collect
        self._compact = compact
        self._gap_s = gap_s
        self._wake = asyncio.Event()
        self.passes = 0
        """Passes run since start."""

    def wake(self) -> None:
        """Run a pass as soon as the last one is ``gap_s`` old."""
        self._wake.set()

    async def run_once(self) -> None:
        """One pass; a failure of either step is logged, and the next pass tries again."""
        self.passes += 1
        try:
            await self._collect()
        except WalogError as exc:
            _log.warning("ledger gc under disk pressure skipped", error=str(exc))
        try:
            await self._compact()
        except StorageIOError as exc:
            _log.error("compaction under disk pressure failed", error=str(exc))

    async def run(self) -> None:
        """Wait for :meth:`wake` and run passes until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            started = loop.time()
            await self.run_once()
            await asyncio.sleep(max(0.0, started + self._gap_s - loop.time()))


__all__ = ["Reclaimer"]

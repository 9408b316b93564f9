"""What each journal group commit tells the storage engine, on the event loop before the
group's waiters complete: counters, stage latencies and group sizes for the metrics, and
which entries a sync made durable (the sync cursors of their ledgers).

A synced group makes every record written so far durable, so the entries of earlier
unsynced (VOLATILE) groups are marked synced together with its own. The sync cursor moves
only here, or by a piggybacked LAC (bookie/storage/engine.py), never backwards.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Protocol, cast

from bookie.storage.journal import GroupReport
from bookie.storage.ledger_state import LedgerState
from walog.latency import StageLatencies
from walog.metrics.histogram import BYTES_BOUNDS, COUNT_BOUNDS, LoopHistogram


class JournalCounters(Protocol):
    """The engine's journal counters (``BookieStats``)."""

    journal_syncs: int
    journal_groups: int
    journal_bytes: int


class GroupReports:
    """Takes the journal's group reports for one engine (``Journal(on_group=...)``).

    Args:
        stats: the engine's counters: journal groups, syncs and bytes.
        latencies: the engine's add stage latencies (the journal's stages are timed here).
        state_of: the ledger's state, None for a ledger the engine does not hold.
        touched: called with a ledger whose sync cursor moved (its state is dirty).
    """

    def __init__(
        self,
        stats: JournalCounters,
        latencies: StageLatencies,
        state_of: Callable[[int], LedgerState | None],
        touched: Callable[[int], None],
    ) -> None:
        self._stats = stats
        self._state_of = state_of
        self._touched = touched
        self._unsynced: list[tuple[int, list[int]]] = []
        self._latencies = latencies
        self.group_entries = LoopHistogram(COUNT_BOUNDS)
        """Records per journal group commit."""
        self.group_bytes = LoopHistogram(BYTES_BOUNDS)
        """Bytes per journal group commit."""

    def on_group(self, report: GroupReport, error: BaseException | None) -> None:
        """One group commit ended (``error``: it failed, and nothing of it counts)."""
        if error is not None:
            return
        latencies = self._latencies
        if report.synced:
            # Every group sync is timed, a barrier's (no records: a checkpoint's) too, so
            # that the sync histogram counts what the sync counter counts.
            latencies.record("journal_sync", report.done - report.written)
        if report.record_count:
            latencies.record("journal_queue", report.started - report.enqueued)
            latencies.record("journal_write", report.written - report.started)
            latencies.record("journal_callback", time.monotonic() - report.done)
            self.group_entries.observe(report.record_count)
            self.group_bytes.observe(report.byte_count)
        stats = self._stats
        stats.journal_groups = report.group_no
        stats.journal_syncs = report.sync_no
        stats.journal_bytes += report.byte_count
        # Only adds are tagged, always with (ledger id, [entry ids]).
        tags = cast(list[tuple[int, list[int]]], report.tags)
        if not report.synced:
            self._unsynced.extend(tags)
            return
        for ledger_id, entry_ids in itertools.chain(self._unsynced, tags):
            state = self._state_of(ledger_id)
            if state is None:
                continue
            first, last = min(entry_ids), max(entry_ids)
            if last - first + 1 == len(entry_ids):  # distinct ids: exactly first..last
                state.sync.mark_run(first, last)
            else:
                for entry_id in entry_ids:
                    state.sync.mark_synced(entry_id)
            self._touched(ledger_id)
        self._unsynced.clear()


__all__ = ["GroupReports", "JournalCounters"]

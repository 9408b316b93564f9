"""The running bookie's parts as its metrics collector reads them (bookie/metrics.py).

Counters are plain integers: the scrape thread reads them as they are. State the event
loop changes in place (the ledger table, admission) is read on the loop, by a callback the
scrape waits for; a scrape that the loop does not answer in time leaves those gauges out
rather than risk reading a table while it changes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

from bookie.disks import DiskMonitor
from bookie.gc import LedgerCollector
from bookie.server.grpc_port import BookieServer
from bookie.server.health import read_only_reason
from bookie.storage.engine import BookieCore
from walog.latency import StageLatencies
from walog.metrics.histogram import LoopHistogram

T = TypeVar("T")

LOOP_SNAPSHOT_TIMEOUT_S = 2.0
"""How long a scrape waits for the event loop to read its state."""


class BookieParts:
    """Implements ``bookie.metrics.BookieSource`` over the running bookie.

    Args:
        server: the gRPC and native service.
        core: the storage engine.
        gc: the ledger collector.
        disks: the disk-usage monitor (read-only mode by disk usage).
        loop: the bookie's event loop (loop-owned state is read there).
    """

    def __init__(
        self,
        server: BookieServer,
        core: BookieCore,
        gc: LedgerCollector,
        disks: DiskMonitor,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._server = server
        self._core = core
        self._gc = gc
        self._disks = disks
        self._loop = loop

    @property
    def service_stats(self) -> object:
        """``ServiceStats`` of the service."""
        return self._server.service.stats

    @property
    def storage_stats(self) -> object:
        """``BookieStats`` of the storage engine."""
        return self._core.stats

    @property
    def latencies(self) -> StageLatencies:
        """Add stage latencies of the storage engine."""
        return self._core.latencies

    def histograms(self) -> dict[str, tuple[str, LoopHistogram]]:
        """Read latency and group-commit sizes."""
        core = self._core
        return {
            "walog_bookie_read_latency_seconds": (
                "Reads: storage time to answer (long-poll waits excluded)",
                self._server.service.read_latency,
            ),
            "walog_bookie_journal_group_entries": (
                "Records per journal group commit",
                core.journal_reports.group_entries,
            ),
            "walog_bookie_journal_group_bytes": (
                "Bytes per journal group commit",
                core.journal_reports.group_bytes,
            ),
        }

    def _on_loop(self, read: Callable[[], T]) -> T | None:
        """``read()`` run on the event loop; None when the loop does not run it in time.

        Called on the loop itself (the registry describes the collector when the bookie
        registers it, at start), ``read()`` runs at once: a callback handed to the loop
        would wait for this call to return, and the loop would stand still for the whole
        timeout.
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            return read()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(read())
            except Exception as exc:  # handed to the scrape, which reports it
                done.set_exception(exc)

        try:
            self._loop.call_soon_threadsafe(run)
            return done.result(LOOP_SNAPSHOT_TIMEOUT_S)
        except (RuntimeError, concurrent.futures.TimeoutError):
            return None  # loop closed or stuck (/healthz tells the latter)

    def _loop_state(self) -> dict[str, tuple[str, float]]:
        core = self._core
        ledgers = core.ledgers()
        return {
            "walog_bookie_ledgers": ("Ledgers stored on the bookie", len(ledgers)),
            "walog_bookie_fenced_ledgers": (
                "Ledgers stored on the bookie that are fenced",
                sum(1 for ledger_id in ledgers if core.is_fenced(ledger_id)),
            ),
            "walog_bookie_inflight_add_bytes": (
                "Payload bytes of adds accepted and not answered yet",
                self._server.service.admission.in_flight,
            ),
        }

    def _entry_logs(self) -> dict[str, tuple[str, float]]:
        count = size = 0
        log_dir = self._core.config.data_dir / "entrylogs"
        for path in log_dir.glob("*.log"):
            try:
                size += path.stat().st_size
            except FileNotFoundError:
                continue  # deleted by the GC meanwhile
            count += 1
        return {
            "walog_bookie_entry_logs": ("Entry log files on disk", count),
            "walog_bookie_entry_log_bytes": ("Bytes of the entry log files on disk", size),
        }

    def gauges(self) -> dict[str, tuple[str, float]]:
        """Current values: state, loop-owned tables, entry logs on disk."""
        service = self._server.service
        out = {
            "walog_bookie_read_only": (
                "1 while the bookie refuses adds (read-only), else 0",
                float(read_only_reason(self._core) is not None),
            ),
            "walog_bookie_draining": (
                "1 once the bookie is shutting down, else 0",
                float(service.draining.is_set()),
            ),
            "walog_bookie_disk_usage_ratio": (
                "Used share of the fullest data or journal file system at the last check",
                self._disks.highest_share,
            ),
            **self._entry_logs(),
        }
        out.update(self._on_loop(self._loop_state) or {})
        return out

    def counters(self) -> dict[str, tuple[str, float]]:
        """The GC's counters."""
        gc = self._gc
        return {
            "walog_bookie_gc_deleted_ledgers": (
                "Ledgers deleted by the GC (their metadata was gone)",
                gc.deleted_total,
            ),
            "walog_bookie_gc_deleted_stray_copies": (
                "Stray copies of closed ledgers deleted by the GC",
                gc.strays_deleted_total,
            ),
            "walog_bookie_read_only_entered": (
                "Times the bookie turned read-only (full disk, failed journal or checkpoint)",
                self._disks.read_only_entered,
            ),
        }


__all__ = ["LOOP_SNAPSHOT_TIMEOUT_S", "BookieParts"]

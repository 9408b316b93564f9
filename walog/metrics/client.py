"""Client metrics, opt-in: what a service embedding walog sees of its cluster.

Nothing is counted unless the service asks::

    import prometheus_client
    import walog
    import walog.metrics

    metrics = walog.metrics.register(prometheus_client.REGISTRY)
    client = walog.connect(uri, metrics=metrics)      # walog.aio.connect too

A client without ``metrics=`` pays one ``is None`` test where it would count. One
:class:`ClientMetrics` may serve every client of an event loop (all sync clients share
one); it counts on that loop's thread and prometheus_client reads it when scraped.
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from walog.metrics.histogram import LoopHistogram, histogram_family


class _Completed(Protocol):
    @property
    def appended(self) -> float: ...

    @property
    def data(self) -> bytes: ...


class ClientMetrics(Collector):
    """The counters and histograms of walog clients; a prometheus_client collector.

    Create it with :func:`register` (or register it yourself) and pass it to
    ``walog.connect(..., metrics=...)``. Attributes are counted by the clients.
    """

    def __init__(self) -> None:
        self.add_latency = LoopHistogram()
        """Seconds from ``append`` to the entry's confirmation (end to end), per entry."""
        self.bookie_add_latency: dict[str, LoopHistogram] = {}
        """Seconds from sending a frame of adds to a bookie to its answer, per bookie."""
        self.lac_wait = LoopHistogram()
        """Seconds tailing readers waited for the LAC to pass the entry they wanted."""
        self.recovery_duration = LoopHistogram()
        """Seconds each ledger recovery (fence, read forward, write back, close) took."""
        self.added_entries = 0
        self.added_bytes = 0
        self.read_entries = 0
        self.read_bytes = 0
        self.ensemble_changes = 0
        self.fenced_writers = 0
        self.failed_recoveries = 0
        self.bookie_errors: collections.Counter[str] = collections.Counter()
        """Errors and timeouts of bookies that made a writer replace them, per bookie."""
        self.backlog_overruns: collections.Counter[tuple[str, str]] = collections.Counter()
        """Retention runs that deleted records a subscription had not read (its backlog was
        over the retention policy's limit), per (log, subscription)."""

    # -- counting (event loop thread) -------------------------------------------------

    def completed(self, adds: Iterable[_Completed], now: float) -> None:
        """Count confirmed adds (``appended`` and ``now`` on the loop's clock)."""
        # LoopHistogram.observe inlined, once per confirmed entry. Adds complete in the
        # order they were appended, so their latencies mostly fall in the bucket of the
        # previous one: look the bucket up again only when a latency leaves it.
        histogram = self.add_latency
        bounds, counts = histogram.bounds, histogram.counts
        top = len(bounds)
        index = -1
        lower = upper = 0.0
        seconds = 0.0
        size = 0
        count = 0
        for add in adds:
            latency = now - add.appended
            if not lower < latency <= upper:
                index = bisect.bisect_left(bounds, latency)
                lower = bounds[index - 1] if index > 0 else -math.inf
                upper = bounds[index] if index < top else math.inf
            counts[index] += 1
            seconds += latency
            size += len(add.data)
            count += 1
        histogram.sum += seconds
        self.added_entries += count
        self.added_bytes += size

    def timed_reply(
        self, bookie: str, on_reply: Callable[..., None], clock: Callable[[], float]
    ) -> Callable[..., None]:
        """``on_reply`` that first counts the time since now into ``bookie``'s latency."""
        histogram = self.bookie_add_latency.get(bookie)
        if histogram is None:
            histogram = self.bookie_add_latency[bookie] = LoopHistogram()
        sent = clock()
        observe = histogram.observe

        def timed(*args: Any) -> None:
            observe(clock() - sent)
            on_reply(*args)

        return timed

    # -- scrape (any thread) ------------------------------------------------------------

    def describe(self) -> Iterator[Metric]:
        """The metric families (their names let a registry refuse a second registration)."""
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        """The metric families of this scrape (called by prometheus_client)."""
        yield histogram_family(
            "walog_client_add_latency_seconds",
            "Appends: from append to confirmation (acked by a quorum, all lower entries too)",
            [({}, self.add_latency)],
        )
        yield histogram_family(
            "walog_client_bookie_add_latency_seconds",
            "Frames of adds: from sending to a bookie to its answer",
            [({"bookie": b}, h) for b, h in sorted(self.bookie_add_latency.items())],
            ["bookie"],
        )
        yield histogram_family(
            "walog_client_lac_wait_seconds",
            "Tailing reads: waiting for the LAC to pass the entry wanted (timeouts excluded)",
            [({}, self.lac_wait)],
        )
        yield histogram_family(
            "walog_client_recovery_duration_seconds",
            "Ledger recoveries that closed the ledger: fence, read forward, write back, close",
            [({}, self.recovery_duration)],
        )
        counters = [
            ("walog_client_added_entries", "Entries appended and confirmed", self.added_entries),
            ("walog_client_added_bytes", "Payload bytes appended and confirmed", self.added_bytes),
            ("walog_client_read_entries", "Entries read", self.read_entries),
            ("walog_client_read_bytes", "Payload bytes read", self.read_bytes),
            (
                "walog_client_ensemble_changes",
                "New fragments written by writers to replace failed bookies",
                self.ensemble_changes,
            ),
            (
                "walog_client_fenced_writers",
                "Writers stopped because a reader recovering their ledger fenced it",
                self.fenced_writers,
            ),
            (
                "walog_client_failed_recoveries",
                "Ledger recoveries that gave up (the ledger stays in recovery)",
                self.failed_recoveries,
            ),
        ]
        for name, documentation, value in counters:
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], float(value))
            yield family
        errors = CounterMetricFamily(
            "walog_client_bookie_errors",
            "Bookie errors and timeouts that made a writer replace the bookie",
            labels=["bookie"],
        )
        for bookie, count in sorted(self.bookie_errors.items()):
            errors.add_metric([bookie], float(count))
        yield errors
        overruns = CounterMetricFamily(
            "walog_client_backlog_overruns",
            "Retention runs that deleted records a subscription had not read (backlog limit)",
            labels=["log", "subscription"],
        )
        for (log_name, subscription), count in sorted(self.backlog_overruns.items()):
            overruns.add_metric([log_name, subscription], float(count))
        yield overruns


def register(registry: CollectorRegistry) -> ClientMetrics:
    """Make client metrics and register them with ``registry``; pass the result to
    ``walog.connect(..., metrics=...)``.

    Args:
        registry: where Prometheus scrapes (``prometheus_client.REGISTRY`` or your own).

    Raises:
        ValueError: ``registry`` already holds walog client metrics (share that object).
    """
    metrics = ClientMetrics()
    registry.register(metrics)
    return metrics


__all__ = ["ClientMetrics", "register"]

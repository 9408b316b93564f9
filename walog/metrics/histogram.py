"""Histograms and counters the event loop updates for a few hundred nanoseconds each.

prometheus_client's own ``Histogram.observe`` takes a lock and costs about as much as a
whole append does on the client, so the hot paths count into these plain objects instead,
and a prometheus_client collector turns them into metric families when Prometheus scrapes
(:func:`histogram_family`). One thread writes (the event loop); the scrape thread only
reads. A scrape may see a bucket already counted and the sum not yet added to: Prometheus
takes each scrape as one sample in time, and the next scrape is whole again.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import HistogramMetricFamily

LATENCY_BOUNDS_S: tuple[float, ...] = tuple(2**k / 1e6 for k in range(4, 27))
"""Upper bounds of latency buckets: powers of two microseconds, 16 us to 67 s."""
COUNT_BOUNDS: tuple[float, ...] = tuple(float(2**k) for k in range(0, 17))
"""Upper bounds of count buckets (entries per group commit, per read): 1 to 65536."""
BYTES_BOUNDS: tuple[float, ...] = tuple(float(4**k) for k in range(4, 14))
"""Upper bounds of size buckets: powers of four bytes, 256 B to 64 MiB."""


class LoopHistogram:
    """Counts of observations per bucket, plus their sum; written by one thread.

    Args:
        bounds: increasing upper bounds (inclusive) of the buckets; one more bucket, +Inf,
            holds everything above the last.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS_S) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("histogram bounds must be distinct and increasing")
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation."""
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le = <=).
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        """How many observations were counted."""
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last (Prometheus's histogram form)."""
        out: list[tuple[str, float]] = []
        seen = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            seen += count
            out.append((_le(bound), float(seen)))
        seen += self.counts[-1]
        out.append(("+Inf", float(seen)))
        return out


def _le(bound: float) -> str:
    # prometheus_client writes le as Python's repr of the float; so do we, to match the
    # series a native Histogram with the same bounds would produce.
    return repr(float(bound))


def histogram_family(
    name: str,
    documentation: str,
    histograms: Iterable[tuple[Mapping[str, str], LoopHistogram]],
    label_names: Sequence[str] = (),
) -> HistogramMetricFamily:
    """One Prometheus histogram family with a series per ``(labels, histogram)`` pair.

    Args:
        name: the metric name (``_bucket``, ``_sum`` and ``_count`` are appended).
        documentation: the HELP text.
        histograms: the label values (keyed by ``label_names``) and histogram of each series.
        label_names: the labels every series carries.
    """
    # Imported here: what only counts never loads the Prometheus client.
    from prometheus_client.core import HistogramMetricFamily

    family = HistogramMetricFamily(name, documentation, labels=list(label_names))
    for labels, histogram in histograms:
        buckets = histogram.buckets()
        # Read the sum after the buckets: a count seen without its sum errs low, never high.
        family.add_metric([labels[n] for n in label_names], buckets, histogram.sum)
    return family


__all__ = [
    "BYTES_BOUNDS",
    "COUNT_BOUNDS",
    "LATENCY_BOUNDS_S",
    "LoopHistogram",
    "histogram_family",
]

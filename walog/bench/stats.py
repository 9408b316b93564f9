"""Latency histograms and rate helpers shared by every benchmark scenario."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager

from hdrh.histogram import HdrHistogram

# Recorded in microseconds: 1 us resolution, up to 60 s, 3 significant digits.
_LOWEST_US = 1
_HIGHEST_US = 60_000_000
_DIGITS = 3


class Latency:
    """An HdrHistogram of durations; values go in as seconds, come out as milliseconds."""

    def __init__(self) -> None:
        self._hist = HdrHistogram(_LOWEST_US, _HIGHEST_US, _DIGITS)

    def record(self, seconds: float) -> None:
        """Add one duration (negative values, from clock skew, count as zero)."""
        micros = min(max(int(seconds * 1e6), _LOWEST_US), _HIGHEST_US)
        self._hist.record_value(micros)

    @property
    def count(self) -> int:
        """How many durations were recorded."""
        return int(self._hist.get_total_count())

    def percentile_ms(self, percentile: float) -> float:
        """The duration at ``percentile`` (0-100) in milliseconds; 0.0 when empty."""
        if self.count == 0:
            return 0.0
        return float(self._hist.get_value_at_percentile(percentile)) / 1000.0

    def summary(self) -> dict[str, float]:
        """p50, p99, p99.9 and max in milliseconds, with the sample count."""
        return {
            "count": float(self.count),
            "p50_ms": round(self.percentile_ms(50.0), 3),
            "p99_ms": round(self.percentile_ms(99.0), 3),
            "p999_ms": round(self.percentile_ms(99.9), 3),
            "max_ms": round(float(self._hist.get_max_value()) / 1000.0, 3) if self.count else 0.0,
        }


@dataclasses.dataclass
class Rate:
    """Operations over a measured wall-clock interval."""

    ops: int = 0
    seconds: float = 0.0
    payload_bytes: int = 0

    @property
    def per_second(self) -> float:
        """Operations per second (0.0 for an empty interval)."""
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_second(self) -> float:
        """Payload megabytes (10^6 bytes) per second."""
        return self.payload_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """Yield a one-element list that holds the elapsed seconds once the block ends."""
    box = [0.0]
    started = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - started


def payload(size: int) -> bytes:
    """A deterministic, not trivially compressible payload of ``size`` bytes."""
    if size < 0:
        raise ValueError(f"payload size must be >= 0, got {size}")
    pattern = bytes((i * 131 + 7) % 256 for i in range(256))
    return (pattern * (size // 256 + 1))[:size]

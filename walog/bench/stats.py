"""Latency histograms, rate helpers and per-process CPU readings (Linux `/proc`) shared by
every benchmark scenario."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

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


def payload(size: int) -> bytes:
    """A deterministic, not trivially compressible payload of ``size`` bytes."""
    if size < 0:
        raise ValueError(f"payload size must be >= 0, got {size}")
    pattern = bytes((i * 131 + 7) % 256 for i in range(256))
    return (pattern * (size // 256 + 1))[:size]


def stat_cpu_seconds(stat: Path) -> float:
    """User + system CPU seconds from a ``/proc/.../stat`` file; OSError when unreadable."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    # Fields 14 and 15 of stat(5) (utime, stime), counted after the "(comm)" field.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``; 0.0 elsewhere)."""
    try:
        return stat_cpu_seconds(Path(f"/proc/{pid}/stat"))
    except OSError:
        return 0.0


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of a process so far by thread name (``/proc/PID/task``; the main thread
    is "main", pool threads are summed under their prefix); empty where unreadable."""
    out: dict[str, float] = {}
    tasks = Path(f"/proc/{pid}/task")
    for task in tasks.glob("*") if tasks.exists() else ():
        try:
            comm = (task / "comm").read_text().strip()
            seconds = stat_cpu_seconds(task / "stat")
        except OSError:
            continue  # the thread ended meanwhile
        name = "main" if task.name == str(pid) else comm.rstrip("0123456789").rstrip("_-")
        out[name] = out.get(name, 0.0) + seconds
    return out

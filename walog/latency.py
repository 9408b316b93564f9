"""Where a bookie's add time goes: one latency histogram per stage, cumulative since start.

The stages of an add batch, in order:

- ``journal_queue``: from the batch's record being queued on the journal to the journal
  thread starting the write of its group (the hand-over between threads, and any group
  still being written ahead of it). Measured for the oldest record of each group.
- ``journal_write``: framing the group's records and writing them.
- ``journal_sync``: the group's ``fdatasync`` (groups that need no sync are not counted).
- ``journal_callback``: from the end of the group's write or sync to the event loop running
  its completion (the hand-back between threads).
- ``add``: from the frame holding the batch being read off its stream to the batch's answer
  being queued for sending (every stage above, plus storing in the write cache).

Buckets are fixed and log-scaled, four per doubling of microseconds, so counts can be
subtracted: ``Info`` reports the cumulative counts, and an observer reads the percentiles of
an interval off the difference of two snapshots (:func:`percentile_us`). Shared by
bookies, which count, and clients, which read; pure: the callers measure the times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

STAGE_LABELS = {
    "journal_queue": "queued for the journal thread, until it starts the group",
    "journal_write": "journal write (framing + write)",
    "journal_sync": "journal fdatasync",
    "journal_callback": "back from the journal thread to the event loop",
    "add": "whole add on the bookie (frame read -> answer queued)",
}
"""Each stage and a short description, in the order an add goes through them."""
STAGES = tuple(STAGE_LABELS)
"""The stages, in the order an add goes through them."""

BUCKETS_PER_DOUBLING = 4
BUCKET_COUNT = 108
"""Bucket 0 holds times under 1 us; bucket ``i`` holds ``[2**((i-1)/4), 2**(i/4))`` us; the
last one also holds everything longer (2**26.75 us is about two minutes)."""


def bucket_of(seconds: float) -> int:
    """The bucket of a duration."""
    micros = seconds * 1e6
    if micros < 1.0:
        return 0
    return min(BUCKET_COUNT - 1, int(math.log2(micros) * BUCKETS_PER_DOUBLING) + 1)


def bucket_middle_us(index: int) -> float:
    """A representative value of a bucket: its geometric middle (0.5 us for bucket 0)."""
    if index == 0:
        return 0.5
    return float(2 ** ((index - 0.5) / BUCKETS_PER_DOUBLING))


def percentile_us(counts: Sequence[int], percentile: float) -> float | None:
    """The ``percentile`` (0-100) of the durations counted, to within a bucket (about 19 %),
    or None when nothing was counted."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = max(1, math.ceil(total * percentile / 100))
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            return bucket_middle_us(index)
    return bucket_middle_us(len(counts) - 1)


class StageLatencies:
    """One histogram per stage (see the module docs); touched on the event loop only."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {stage: [0] * BUCKET_COUNT for stage in STAGES}
        self.sums: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        """Seconds counted per stage (the ``_sum`` of the Prometheus histograms)."""

    def record(self, stage: str, seconds: float) -> None:
        """Count one duration of ``stage``."""
        self.counts[stage][bucket_of(seconds)] += 1
        self.sums[stage] += seconds

    def cumulative(self, stage: str, bounds_us: Sequence[int]) -> list[int]:
        """Counts of ``stage`` at most each bound, for bounds that are powers of two
        microseconds (bucket edges, so the counts are exact), then the total."""
        counts = self.counts[stage]
        out = []
        for bound in bounds_us:
            exponent = bound.bit_length() - 1
            if bound <= 0 or 1 << exponent != bound:
                raise ValueError(f"bound {bound} us is not a power of two")
            # Bucket i ends at 2**(i/4) us: the buckets up to 4 * exponent end at the bound.
            out.append(sum(counts[: min(exponent * BUCKETS_PER_DOUBLING + 1, BUCKET_COUNT)]))
        out.append(sum(counts))
        return out


__all__ = [
    "BUCKET_COUNT",
    "STAGES",
    "STAGE_LABELS",
    "StageLatencies",
    "bucket_middle_us",
    "bucket_of",
    "percentile_us",
]

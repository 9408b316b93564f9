"""Stage latency histograms (walog/latency.py): fixed log-scale buckets and percentiles."""

from __future__ import annotations

import pytest

from walog.latency import BUCKET_COUNT, StageLatencies, bucket_of, percentile_us


def test_buckets_are_four_per_doubling_from_one_microsecond() -> None:
    assert bucket_of(0.0) == bucket_of(0.9e-6) == 0
    assert bucket_of(1e-6) == 1
    assert bucket_of(2e-6) == 5
    assert bucket_of(1024e-6) == 41
    assert bucket_of(3600.0) == BUCKET_COUNT - 1  # everything longer goes in the last


@pytest.mark.parametrize("micros", [3.0, 97.0, 1_000.0, 250_000.0])
def test_a_percentile_is_within_a_bucket_of_the_true_value(micros: float) -> None:
    latencies = StageLatencies()
    for _ in range(10):
        latencies.record("journal_sync", micros / 1e6)
    p50 = percentile_us(latencies.counts["journal_sync"], 50)
    assert p50 is not None
    assert micros / 1.19 <= p50 <= micros * 1.19


def test_percentiles_come_from_the_difference_of_two_snapshots() -> None:
    latencies = StageLatencies()
    for _ in range(1000):
        latencies.record("add", 5e-3)  # before the interval
    before = list(latencies.counts["add"])
    for _ in range(98):
        latencies.record("add", 200e-6)
    latencies.record("add", 20e-3)
    latencies.record("add", 40e-3)
    spent = [a - b for a, b in zip(latencies.counts["add"], before, strict=True)]
    p50, p99 = percentile_us(spent, 50), percentile_us(spent, 99)
    assert p50 is not None and 200 / 1.19 <= p50 <= 200 * 1.19
    assert p99 is not None and 20_000 / 1.19 <= p99 <= 20_000 * 1.19
    assert percentile_us([0] * BUCKET_COUNT, 50) is None

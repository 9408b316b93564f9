"""Loop histograms: Prometheus's bucket rule (``le`` is inclusive), cumulative counts, and
the bookie's stage latencies read at power-of-two bounds without loss."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from walog.latency import StageLatencies
from walog.metrics.histogram import LoopHistogram, histogram_family


def test_a_value_equal_to_a_bound_counts_in_that_bound_s_bucket() -> None:
    histogram = LoopHistogram([1.0, 2.0, 4.0])
    for value in (0.5, 1.0, 1.5, 2.0, 4.0, 9.0):
        histogram.observe(value)
    assert histogram.buckets() == [("1.0", 2.0), ("2.0", 4.0), ("4.0", 5.0), ("+Inf", 6.0)]
    assert histogram.count == 6
    assert histogram.sum == pytest.approx(18.0)


def test_histogram_bounds_must_increase() -> None:
    with pytest.raises(ValueError, match="increasing"):
        LoopHistogram([2.0, 1.0])
    with pytest.raises(ValueError, match="increasing"):
        LoopHistogram([])


def test_a_histogram_family_renders_as_prometheus_client_would() -> None:
    histogram = LoopHistogram([0.001, 0.01])
    histogram.observe(0.005)

    class One(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield histogram_family("x_seconds", "x", [({"b": "h:1"}, histogram)], ["b"])

    registry = CollectorRegistry()
    registry.register(One())
    text = generate_latest(registry).decode()
    assert 'x_seconds_bucket{b="h:1",le="0.001"} 0.0' in text
    assert 'x_seconds_bucket{b="h:1",le="0.01"} 1.0' in text
    assert 'x_seconds_bucket{b="h:1",le="+Inf"} 1.0' in text
    assert 'x_seconds_count{b="h:1"} 1.0' in text
    assert 'x_seconds_sum{b="h:1"} 0.005' in text


def test_stage_latencies_read_at_power_of_two_bounds_lose_nothing() -> None:
    latencies = StageLatencies()
    for micros in (3, 15, 17, 100, 1000, 1023, 1025, 10**9):
        latencies.record("add", micros / 1e6)
    # Below 16 us: 3, 15. Below 1024 us: also 17, 100, 1000, 1023. Then everything.
    assert latencies.cumulative("add", [16, 1024]) == [2, 6, 8]
    assert latencies.sums["add"] == pytest.approx(
        sum((3, 15, 17, 100, 1000, 1023, 1025, 1e9)) / 1e6
    )
    with pytest.raises(ValueError, match="power of two"):
        latencies.cumulative("add", [1000])

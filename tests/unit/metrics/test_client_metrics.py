"""Client metrics count exactly what a plain histogram would, whatever order adds complete in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from walog.ledger.writer import PendingAdd
from walog.metrics.client import ClientMetrics
from walog.metrics.histogram import LoopHistogram

_latencies = st.lists(
    st.one_of(
        st.floats(min_value=0.0, max_value=100.0, allow_nan=False),
        st.sampled_from([16e-6, 2**-10, 0.0, 67.108864]),  # on and around bucket bounds
    ),
    max_size=60,
)


@given(_latencies)
def test_completed_adds_count_as_one_observation_each(latencies: list[float]) -> None:
    now = 1000.0
    adds = [PendingAdd(i, b"ab", -1, 0, None, appended=now - s) for i, s in enumerate(latencies)]  # type: ignore[arg-type]
    metrics = ClientMetrics()
    metrics.completed(adds, now)
    reference = LoopHistogram()
    for add in adds:
        reference.observe(now - add.appended)
    assert metrics.add_latency.counts == reference.counts
    assert metrics.added_entries == len(adds)
    assert metrics.added_bytes == 2 * len(adds)

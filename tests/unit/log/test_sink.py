"""The sink commit's pure decisions: what is linked, in which order, what is abandoned."""

from __future__ import annotations

import pytest

from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.position import Position
from walog.log.sink import (
    SINK_BATCH_TAG,
    SINK_ID_TAG,
    SINK_QUERY_TAG,
    SINK_TAG,
    SinkBatch,
    SinkIdReusedError,
    SinkLedger,
    abandoned,
    already_linked,
    link,
    list_floor,
    out_of_order,
)


def _batch(
    *ids: int,
    sink: str | None = "etl",
    batch_id: int = 3,
    query: str | None = None,
    reset: bool = False,
) -> SinkBatch:
    ledgers = tuple(SinkLedger(i, 4, 100) for i in ids)
    return SinkBatch("orders", "txn", ledgers, sink, batch_id, query, reset)


def test_linked_ledgers_follow_the_recovered_tail_closed_and_bump_the_epoch() -> None:
    meta = LogMetadata(ledgers=(LedgerInfo(5, "CLOSED", 9), LedgerInfo(7)), epoch=2)
    recovered = {7: LedgerInfo(7).closed(3, None, 1.0)}
    new = link(meta, _batch(10, 12), recovered, now=2.0)
    assert new.ledger_ids == [5, 7, 10, 12]
    assert all(i.is_closed for i in new.ledgers)
    assert new.ledgers[2].last_entry_id == 4 and new.ledgers[2].size_bytes == 100
    assert new.epoch == 3 and new.sinks == {"etl": 3}


def test_an_empty_recovered_tail_ledger_leaves_the_list_as_a_pending_deletion() -> None:
    meta = LogMetadata(ledgers=(LedgerInfo(5, "CLOSED", 9), LedgerInfo(7)))
    new = link(meta, _batch(10), {7: LedgerInfo(7).closed(-1, None, 1.0)}, now=2.0)
    assert new.ledger_ids == [5, 10] and new.pending_deletion == (7,)


def test_a_batch_of_the_query_that_linked_its_sink_id_is_linked_up_to_the_last_one() -> None:
    meta = LogMetadata(ledgers=(LedgerInfo(5),), sinks={"etl": 3}, sink_queries={"etl": "q1"})
    assert already_linked(meta, _batch(10, batch_id=3, query="q1"))
    assert already_linked(meta, _batch(10, batch_id=2, query="q1"))
    assert not already_linked(meta, _batch(10, batch_id=4, query="q1"))
    assert not already_linked(meta, _batch(10, sink="other", batch_id=0, query="q2"))
    # Its own record stays its own with reset set: retries stay deduplicated.
    assert already_linked(meta, _batch(10, batch_id=3, query="q1", reset=True))


def test_a_jobs_batch_is_linked_once_when_it_is_the_last_one_and_new_above_it() -> None:
    meta = LogMetadata(sinks={"etl": 3})
    assert already_linked(meta, _batch(10, batch_id=3))
    assert not already_linked(meta, _batch(10, batch_id=4))
    # A query's record from before queries were recorded continues as the query's.
    assert already_linked(meta, _batch(10, batch_id=3, query="q1"))
    assert not already_linked(meta, _batch(10, batch_id=4, query="q1"))


def test_a_batch_a_sink_ids_record_cannot_vouch_for_is_refused_naming_it_and_the_fix() -> None:
    ours = LogMetadata(sinks={"etl": 3}, sink_queries={"etl": "q1"})
    for batch_id in (0, 3, 9):  # a new checkpoint's batches, whatever their numbers
        with pytest.raises(SinkIdReusedError) as refused:
            already_linked(ours, _batch(10, batch_id=batch_id, query="q2"))
        message = str(refused.value)
        for part in ("'orders'", "sink id 'etl'", "up to 3", "q1", "q2", "resetSinkId=true"):
            assert part in message
    with pytest.raises(SinkIdReusedError, match="of a batch job does not continue"):
        already_linked(ours, _batch(10, batch_id=4))
    with pytest.raises(SinkIdReusedError, match="batch 2 is below it"):
        already_linked(LogMetadata(sinks={"etl": 3}), _batch(10, batch_id=2))


def test_reset_starts_a_sink_id_over_from_a_batch_its_record_cannot_vouch_for() -> None:
    ours = LogMetadata(sinks={"etl": 3}, sink_queries={"etl": "q1"})
    assert not already_linked(ours, _batch(10, batch_id=0, query="q2", reset=True))
    assert not already_linked(ours, _batch(10, batch_id=0, reset=True))
    assert not already_linked(LogMetadata(sinks={"etl": 3}), _batch(10, batch_id=3, reset=True))
    new = link(ours, _batch(10, batch_id=0, query="q2", reset=True), {}, now=1.0)
    assert new.sinks == {"etl": 0} and new.sink_queries == {"etl": "q2"}
    job = link(new, _batch(11, batch_id=0, reset=True), {}, now=1.0)
    assert job.sinks == {"etl": 0} and job.sink_queries == {}


def test_a_batch_whose_ledger_is_listed_is_already_linked_without_a_sink_id() -> None:
    # A commit whose CAS applied while its answer was lost finds its own ledgers.
    meta = LogMetadata(ledgers=(LedgerInfo(5), LedgerInfo(10, "CLOSED", 4)))
    assert already_linked(meta, _batch(10, 11, sink=None))
    assert not already_linked(meta, _batch(11, sink=None))


def test_ledgers_that_would_break_ascending_ids_are_copied() -> None:
    # A copy is newer than every ledger: whatever follows the first copy is copied too.
    ledgers = [SinkLedger(i, 0, 1) for i in (12, 13, 11, 15, 16)]
    assert out_of_order(ledgers, floor=10) == [2, 3, 4]
    assert out_of_order(ledgers, floor=12) == [0, 1, 2, 3, 4]
    assert out_of_order(ledgers[3:], floor=10) == []
    assert out_of_order([], floor=3) == []


def test_the_floor_covers_listed_pending_and_truncated_ledgers() -> None:
    assert list_floor(LogMetadata()) == -1
    meta = LogMetadata(
        ledgers=(LedgerInfo(8),), pending_deletion=(9,), truncated_through=Position(6, 0, 0)
    )
    assert list_floor(meta) == 9


def test_unlinked_sink_ledgers_are_abandoned_once_their_batch_is_linked_or_after_grace() -> None:
    meta = LogMetadata(sinks={"etl": 3})
    tags = {SINK_TAG: "orders", SINK_ID_TAG: "etl", SINK_BATCH_TAG: "3"}
    assert abandoned(tags, 100.0, meta, "orders", grace=50.0, now=101.0)
    later = {**tags, SINK_BATCH_TAG: "4"}
    assert not abandoned(later, 100.0, meta, "orders", grace=50.0, now=101.0)
    assert abandoned(later, 100.0, meta, "orders", grace=50.0, now=151.0)
    assert not abandoned(tags, 100.0, meta, "other-log", grace=50.0, now=1e9)
    assert not abandoned({"walog.log": "orders"}, 0.0, meta, "orders", grace=1.0, now=1e9)


def test_a_sink_ledger_of_another_query_than_the_record_waits_for_the_grace_period() -> None:
    meta = LogMetadata(sinks={"etl": 3}, sink_queries={"etl": "q1"})
    tags = {SINK_TAG: "orders", SINK_ID_TAG: "etl", SINK_BATCH_TAG: "0", SINK_QUERY_TAG: "q1"}
    assert abandoned(tags, 100.0, meta, "orders", grace=50.0, now=101.0)
    # A new query's batch 0, still to be linked with reset: not the record's numbering.
    other = {**tags, SINK_QUERY_TAG: "q2"}
    assert not abandoned(other, 100.0, meta, "orders", grace=50.0, now=101.0)
    job = {k: v for k, v in tags.items() if k != SINK_QUERY_TAG}
    assert not abandoned(job, 100.0, meta, "orders", grace=50.0, now=101.0)
    assert abandoned(other, 100.0, meta, "orders", grace=50.0, now=151.0)


def test_metadata_without_sinks_reads_as_no_sinks_and_round_trips() -> None:
    old = b'{"format": 1, "epoch": 1, "ledgers": []}'
    assert LogMetadata.from_json(old).sinks == {}
    assert LogMetadata.from_json(old).sink_queries == {}
    meta = LogMetadata(sinks={"etl": 7}, sink_queries={"etl": "q1"})
    back = LogMetadata.from_json(meta.to_json())
    assert back.sinks == {"etl": 7} and back.sink_queries == {"etl": "q1"}

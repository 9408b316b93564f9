"""Pure rules of the write path: in-order completion, payload checks, ledger options."""

from __future__ import annotations

import asyncio
import collections

import pytest

from walog import mutations
from walog.errors import RecordTooLargeError, UnauthorizedError
from walog.ledger.create import password_check, verify_password
from walog.ledger.writer import PendingAdd, as_payload, pop_completed
from walog.metadata.layout import LedgerMetadata
from walog.wire.digest import master_key


def _mask(indexes: set[int]) -> int:
    return sum(1 << i for i in indexes)


def _pending(acks: dict[int, set[int]]) -> collections.deque[PendingAdd]:
    loop = asyncio.new_event_loop()
    try:
        return collections.deque(
            PendingAdd(e, b"", e - 1, 0, loop.create_future(), _mask(a)) for e, a in acks.items()
        )
    finally:
        loop.close()


def test_add_completes_only_when_every_lower_entry_completed() -> None:
    # Entry 1 has its ack quorum, entry 0 does not: nothing completes yet.
    pending = _pending({0: {0}, 1: {0, 1}, 2: {1, 2}})
    assert pop_completed(pending, 2) == []
    assert [a.entry_id for a in pending] == [0, 1, 2]
    pending[0].acked |= _mask({2})
    assert [a.entry_id for a in pop_completed(pending, 2)] == [0, 1, 2]
    assert not pending


def test_completed_prefix_stops_at_first_entry_without_ack_quorum() -> None:
    pending = _pending({5: {0, 1}, 6: {1, 2}, 7: {2}, 8: {0, 1, 2}})
    assert [a.entry_id for a in pop_completed(pending, 2)] == [5, 6]
    assert [a.entry_id for a in pending] == [7, 8]


def test_ack_quorum_counts_distinct_bookies() -> None:
    pending = _pending({0: {1}})
    pending[0].acked |= _mask({1})  # the same bookie twice is one ack
    assert pop_completed(pending, 2) == []
    assert [a.entry_id for a in pop_completed(pending, 1)] == [0]


def test_out_of_order_ack_mutation_completes_past_a_gap() -> None:
    pending = _pending({0: {0}, 1: {0, 1}})
    with mutations.enabled_mutations("out_of_order_ack"):
        assert [a.entry_id for a in pop_completed(pending, 2)] == [1]


def test_str_entry_is_refused_with_type_error() -> None:
    with pytest.raises(TypeError, match="encode"):
        as_payload("text", 100)
    with pytest.raises(TypeError, match="int"):
        as_payload(5, 100)


def test_any_bytes_like_entry_is_accepted_and_copied() -> None:
    buffer = bytearray(b"abc")
    payload = as_payload(buffer, 100)
    buffer[0] = ord("z")
    assert payload == b"abc"
    assert as_payload(memoryview(b"xyz"), 100) == b"xyz"
    assert as_payload(b"", 100) == b""


def test_entry_over_max_entry_bytes_is_refused_as_too_large() -> None:
    assert as_payload(b"x" * 10, 10) == b"x" * 10
    with pytest.raises(RecordTooLargeError, match="11 bytes exceeds max_entry_bytes=10") as caught:
        as_payload(b"x" * 11, 10)
    assert isinstance(caught.value, ValueError)  # bad input, as before
    assert (caught.value.size, caught.value.limit) == (11, 10)


def test_wrong_password_is_refused_without_the_password_being_stored() -> None:
    key = master_key(b"secret")
    metadata = LedgerMetadata(7, 3, 3, 2, password_check=password_check(key))
    assert b"secret".hex() not in metadata.to_json().decode()
    assert verify_password(metadata, b"secret") == key
    with pytest.raises(UnauthorizedError, match="ledger 7"):
        verify_password(metadata, b"other")

"""Entry format v1: records packed into entries and back, limits, refusals."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walog.log.records import (
    HEADER_BYTES,
    RECORD_OVERHEAD_BYTES,
    RecordBatch,
    RecordFormatError,
    decode_records,
    encode_records,
)

records_st = st.lists(
    st.tuples(st.floats(allow_nan=False, allow_infinity=False), st.binary(max_size=64)),
    min_size=1,
    max_size=20,
)


@given(records_st)
def test_records_round_trip_in_slot_order(records: list[tuple[float, bytes]]) -> None:
    entry = encode_records(records)
    assert len(entry) == HEADER_BYTES + sum(RECORD_OVERHEAD_BYTES + len(p) for _, p in records)
    assert decode_records(entry) == records


def test_unknown_format_version_is_refused() -> None:
    entry = bytearray(encode_records([(1.0, b"x")]))
    entry[0] = 2
    with pytest.raises(RecordFormatError, match="version 2"):
        decode_records(bytes(entry))


@pytest.mark.parametrize("cut", [1, HEADER_BYTES + 3, HEADER_BYTES + RECORD_OVERHEAD_BYTES + 1])
def test_truncated_entry_is_refused(cut: int) -> None:
    entry = encode_records([(1.0, b"hello")])
    with pytest.raises(RecordFormatError, match=r"truncated|shorter"):
        decode_records(entry[:cut])


def test_trailing_bytes_and_zero_records_are_refused() -> None:
    with pytest.raises(RecordFormatError, match="after its records"):
        decode_records(encode_records([(1.0, b"a")]) + b"z")
    with pytest.raises(RecordFormatError, match="zero records"):
        decode_records(struct.pack(">BI", 1, 0))
    with pytest.raises(ValueError):
        encode_records([])


def test_batch_respects_max_bytes_and_max_records() -> None:
    batch = RecordBatch(max_bytes=HEADER_BYTES + 2 * (RECORD_OVERHEAD_BYTES + 10), max_records=3)
    assert batch.max_payload_bytes == 10 + RECORD_OVERHEAD_BYTES + 10
    assert batch.fits(10)
    assert batch.add(0.0, b"a" * 10) == 0
    assert batch.fits(10) and not batch.fits(11)
    assert batch.add(0.0, b"b" * 10) == 1
    assert batch.full
    assert len(batch.encode()) == batch.size
    small = RecordBatch(max_bytes=1000, max_records=2)
    small.add(0.0, b"")
    small.add(0.0, b"")
    assert not small.fits(0)


def test_batch_refuses_limits_with_no_room() -> None:
    with pytest.raises(ValueError, match="no room"):
        RecordBatch(max_bytes=HEADER_BYTES + RECORD_OVERHEAD_BYTES, max_records=1)
    with pytest.raises(ValueError, match="max records"):
        RecordBatch(max_bytes=100, max_records=0)

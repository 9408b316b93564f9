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
    record_bytes,
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
    entry[0] = 3
    with pytest.raises(RecordFormatError, match="version 3"):
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
    assert batch.add(0.0, b"a" * 10) is False
    assert batch.fits(10) and not batch.fits(11)
    assert batch.add(0.0, b"b" * 10) is True  # full: add() says so without another check
    assert batch.full
    assert len(batch) == 2
    assert len(batch.encode()) == batch.size
    small = RecordBatch(max_bytes=1000, max_records=2)
    assert small.add(0.0, b"") is False
    assert small.add(0.0, b"") is True
    assert not small.fits(0)


@given(records_st)
def test_batch_encodes_like_encode_records(records: list[tuple[float, bytes]]) -> None:
    batch = RecordBatch(max_bytes=1 << 20, max_records=100)
    for timestamp, payload in records:
        assert batch.fits(len(payload))
        batch.add(timestamp, payload)
    entry = batch.encode()
    assert entry == encode_records(records)
    assert len(entry) == batch.size
    assert batch.payload_bytes == sum(len(p) for _, p in records)
    assert decode_records(entry) == records


def test_empty_batch_does_not_encode() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        RecordBatch(max_bytes=1000, max_records=2).encode()


@pytest.mark.parametrize("data", [bytearray(b"ab"), memoryview(b"ab"), b"ab"])
def test_bytes_like_records_are_copied_to_bytes(data: bytes | bytearray | memoryview) -> None:
    payload = record_bytes(data)
    assert type(payload) is bytes and payload == b"ab"


@pytest.mark.parametrize("data", ["ab", 3, [1, 2], None])
def test_records_that_are_not_bytes_like_are_refused(data: object) -> None:
    with pytest.raises(TypeError, match="log records are"):
        record_bytes(data)


def test_batch_refuses_limits_with_no_room() -> None:
    with pytest.raises(ValueError, match="no room"):
        RecordBatch(max_bytes=HEADER_BYTES + RECORD_OVERHEAD_BYTES, max_records=1)
    with pytest.raises(ValueError, match="max records"):
        RecordBatch(max_bytes=100, max_records=0)
    with pytest.raises(ValueError, match="4 GiB"):
        RecordBatch(max_bytes=HEADER_BYTES + RECORD_OVERHEAD_BYTES + 2**32, max_records=1)

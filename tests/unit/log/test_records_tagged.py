"""Entry format 2: records of producer sessions packed into entries and back."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walog.errors import SequenceError
from walog.log.entry_limit import repack, unpack
from walog.log.records import (
    FORMAT_VERSION,
    HEADER_BYTES,
    MAX_SEQ,
    TAGGED_FORMAT_VERSION,
    TAGGED_OVERHEAD_BYTES,
    RecordBatch,
    RecordFormatError,
    Tag,
    TaggedRecordBatch,
    check_seq,
    decode_records,
    decode_tagged,
    encode_records,
    entry_time_range,
    iter_record_views,
    producer_prefix,
    record_timestamps,
)

tags_st = st.one_of(
    st.none(),
    st.tuples(st.text(min_size=1, max_size=20), st.integers(min_value=0, max_value=MAX_SEQ)),
)
tagged_st = st.lists(
    st.tuples(st.floats(allow_nan=False, allow_infinity=False), st.binary(max_size=64), tags_st),
    min_size=1,
    max_size=20,
)


@given(tagged_st)
def test_tagged_records_round_trip_with_their_producers_and_seqs(
    records: list[tuple[float, bytes, Tag]],
) -> None:
    entry = encode_records([(t, p) for t, p, _ in records], [tag for _, _, tag in records])
    assert decode_tagged(entry) == records
    assert entry[0] == (
        TAGGED_FORMAT_VERSION if any(tag for _, _, tag in records) else FORMAT_VERSION
    )


@given(tagged_st)
def test_every_plain_reader_reads_format_2_entries(records: list[tuple[float, bytes, Tag]]) -> None:
    tags: list[Tag] = [tag for _, _, tag in records]
    tags[0] = ("svc-7", 1)  # at least one record of a producer: format 2
    entry = encode_records([(t, p) for t, p, _ in records], tags)
    assert entry[0] == TAGGED_FORMAT_VERSION
    assert decode_records(entry) == [(t, p) for t, p, _ in records]
    assert [bytes(v) for _, v in iter_record_views(entry)] == [p for _, p, _ in records]
    assert record_timestamps(entry) == [t for t, _, _ in records]
    assert entry_time_range(entry) == (records[0][0], records[-1][0])


def test_records_without_producers_keep_format_1_bytes() -> None:
    records = [(1.0, b"a"), (2.0, b"bc")]
    entry = encode_records(records, [None, None])
    assert entry == struct.pack(">BIdI", 1, 2, 1.0, 1) + b"a" + struct.pack(">dI", 2.0, 2) + b"bc"


def test_format_2_layout_is_as_documented() -> None:
    entry = encode_records([(1.0, b"x"), (2.0, b"yz")], [("p", 7), None])
    assert entry == (
        struct.pack(">BI", 2, 2)
        + struct.pack(">dB", 1.0, 1)
        + b"p"
        + struct.pack(">QI", 7, 1)
        + b"x"
        + struct.pack(">dBI", 2.0, 0, 2)
        + b"yz"
    )


@given(tagged_st)
def test_tagged_batch_encodes_like_encode_records(records: list[tuple[float, bytes, Tag]]) -> None:
    batch = TaggedRecordBatch(max_bytes=1 << 20, max_records=100)
    for timestamp, payload, tag in records:
        if tag is None:
            assert batch.fits(len(payload))
            batch.add(timestamp, payload)
        else:
            prefix = producer_prefix(tag[0])
            assert batch.fits_tagged(len(payload), prefix)
            batch.add_tagged(timestamp, payload, prefix, tag[1])
    entry = batch.encode()
    assert len(entry) == batch.size
    assert decode_tagged(entry) == records
    assert batch.payload_bytes == sum(len(p) for _, p, _ in records)


def test_tagged_batch_respects_max_bytes() -> None:
    prefix = producer_prefix("ab")
    one = TAGGED_OVERHEAD_BYTES - 1 + len(prefix) + 10
    batch = TaggedRecordBatch(HEADER_BYTES + 2 * one, max_records=5)
    assert batch.max_tagged_payload_bytes(prefix) == 2 * one - one + 10
    assert batch.fits_tagged(10, prefix)
    batch.add_tagged(0.0, b"a" * 10, prefix, 0)
    assert batch.fits_tagged(10, prefix) and not batch.fits_tagged(11, prefix)
    batch.add_tagged(0.0, b"b" * 10, prefix, 1)
    assert batch.size == HEADER_BYTES + 2 * one == len(batch.encode())


def test_a_format_1_batch_takes_no_record_of_a_producer() -> None:
    with pytest.raises(ValueError, match="format 2"):
        RecordBatch(1000, 10).add_tagged(0.0, b"x", producer_prefix("p"), 0)


@pytest.mark.parametrize(
    ("producer", "error", "match"),
    [("", ValueError, "empty"), ("é" * 128, ValueError, "at most 255"), (7, TypeError, "str")],
)
def test_producer_names_a_record_cannot_carry_are_refused(
    producer: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        producer_prefix(producer)


@pytest.mark.parametrize(
    ("seq", "error", "match"),
    [(-1, ValueError, ">= 0"), (MAX_SEQ + 1, ValueError, "largest"), ("3", TypeError, "int")],
)
def test_seqs_a_record_cannot_carry_are_refused(
    seq: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        check_seq(seq)


def test_a_bool_is_no_seq() -> None:
    with pytest.raises(TypeError, match="seq must be an int"):
        check_seq(True)


def test_sequence_errors_are_value_errors_of_walog() -> None:
    assert issubclass(SequenceError, ValueError)


@pytest.mark.parametrize("cut", [1, HEADER_BYTES + 3, HEADER_BYTES + 9, HEADER_BYTES + 12])
def test_truncated_format_2_entry_is_refused(cut: int) -> None:
    entry = encode_records([(1.0, b"hello")], [("pp", 3)])
    with pytest.raises(RecordFormatError, match=r"truncated|shorter"):
        decode_tagged(entry[:cut])
    with pytest.raises(RecordFormatError, match="after its records"):
        decode_tagged(entry + b"z")


def test_repack_keeps_producers_and_seqs() -> None:
    entries = [
        (encode_records([(1.0, b"a" * 10), (2.0, b"b" * 10)], [("p", 1), None]), ["s1", "s2"]),
        (encode_records([(3.0, b"c" * 10)]), ["s3"]),
    ]
    records = unpack(entries)
    assert [r[3] for r in records] == [("p", 1), None, None]
    repacked = repack(records, HEADER_BYTES + 50, 10)
    assert repacked.too_large == []
    assert [sinks for _, _, sinks in repacked.entries] == [["s1"], ["s2", "s3"]]
    assert decode_tagged(repacked.entries[0][0]) == [(1.0, b"a" * 10, ("p", 1))]
    assert decode_tagged(repacked.entries[1][0]) == [(2.0, b"b" * 10, None), (3.0, b"c" * 10, None)]

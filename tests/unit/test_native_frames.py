"""The frame rules of the native bookie protocol (walog/wire/frames.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walog.wire.frames import (
    HEADER,
    Code,
    FrameDecoder,
    FrameError,
    Kind,
    Method,
    decode_status,
    encode,
    encode_end,
    encode_status,
)

_frames = st.lists(
    st.tuples(
        st.integers(0, 2**32 - 1),
        st.sampled_from(list(Kind)),
        st.integers(0, 255),
        st.binary(max_size=300),
    ),
    max_size=8,
)


@given(frames=_frames, cuts=st.lists(st.integers(0, 3000), max_size=6))
def test_frames_come_out_whole_and_in_order_however_the_bytes_are_split(
    frames: list[tuple[int, Kind, int, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(encode(call_id, kind, method, body) for call_id, kind, method, body in frames)
    decoder = FrameDecoder()
    out = []
    start = 0
    for cut in [*sorted(c for c in cuts if c < len(stream)), len(stream)]:
        out += decoder.feed(stream[start:cut])
        start = cut
    assert out == frames
    assert all(type(body) is bytes for *_, body in out)  # never a view of a reused buffer
    assert decoder.buffered == 0


def test_frames_split_into_single_bytes_come_out_whole() -> None:
    frames = [
        (1, Kind.DATA, Method.ADD, b"abc" * 50),
        (2, Kind.END, 0, b""),
        (3, Kind.DATA, 1, b"z"),
    ]
    stream = b"".join(encode(*frame) for frame in frames)
    decoder = FrameDecoder()
    out = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
        consumed = sum(HEADER.size + len(body) for *_, body in out)
        assert decoder.buffered == i + 1 - consumed
    assert out == frames


def test_a_frame_over_the_limit_is_refused_before_its_body_arrives() -> None:
    decoder = FrameDecoder(max_body=100)
    assert decoder.feed(encode(1, Kind.DATA, Method.ADD, b"x" * 100))
    with pytest.raises(FrameError, match="101 bytes is over the 100 limit"):
        decoder.feed(HEADER.pack(101, 1, Kind.DATA, Method.ADD))


@pytest.mark.parametrize("kind", [0, 5, 255])
def test_an_unknown_frame_kind_is_refused(kind: int) -> None:
    with pytest.raises(FrameError, match=f"unknown frame kind {kind}"):
        FrameDecoder().feed(HEADER.pack(0, 1, kind, 0))


def test_a_status_travels_with_its_reason() -> None:
    assert decode_status(encode_status(Code.UNAUTHENTICATED, "wrong token")) == (
        Code.UNAUTHENTICATED,
        "wrong token",
    )
    ((call_id, kind, _, body),) = FrameDecoder().feed(encode_end(7, Code.OK))
    assert (call_id, kind, decode_status(body)) == (7, Kind.END, (Code.OK, ""))


@pytest.mark.parametrize("body", [b"", b"\xfe", b"\x02oops"])
def test_an_empty_or_unknown_status_is_an_internal_error_never_ok(body: bytes) -> None:
    assert decode_status(body)[0] == Code.INTERNAL

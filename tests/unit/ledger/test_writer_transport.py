"""Pure parts of the transport the writer relies on: frames and read verification."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import NamedTuple

from walog.transport.base import BatchCallback
from walog.transport.codec import (
    SHARED_BATCH_BYTES,
    BatchEncoder,
    PendingBatch,
    build_frame,
    queue_packed,
    verified_entries,
)
from walog.wire.digest import entry_digest
from walog.wire.packing import ENTRY_HEADER, PackedEntries, unpack_entries
from walog.wire.proto import bookie_pb2 as pb

KEY = b"k" * 32
ENCODER = BatchEncoder()


class _Out(NamedTuple):
    entry_id: int
    lac: int
    data: bytes
    digest: int


def _queue(
    batches: collections.deque[PendingBatch],
    entries: list[_Out],
    ledger: int = 1,
    key: bytes = KEY,
    recovery: bool = False,
    durability: int = pb.PERSISTENT,
    callback: BatchCallback | None = None,
    max_entries: int = 512,
    max_bytes: int = 1 << 20,
) -> None:
    """Queue the entries one packed chunk each."""
    for entry in entries:
        queue_packed(
            batches,
            ledger,
            key,
            recovery,
            durability,
            callback or _ignore,
            PackedEntries.pack([entry]),
            0.0,
            max_entries,
            max_bytes,
            ENCODER,
        )


def _queued(
    count: int, size: int = 10, max_entries: int = 512, max_bytes: int = 1 << 20
) -> collections.deque[PendingBatch]:
    batches: collections.deque[PendingBatch] = collections.deque()
    entries = [_Out(e, e - 1, b"x" * size, 0) for e in range(count)]
    _queue(batches, entries, max_entries=max_entries, max_bytes=max_bytes)
    return batches


def _ignore(entry_ids: Sequence[int], reply: object) -> None:
    pass


def _other(entry_ids: Sequence[int], reply: object) -> None:
    pass


def _frame(
    batches: collections.deque[PendingBatch],
    lacs: list[tuple[int, int, bytes]],
    forces: list[tuple[int, int, bytes]],
    max_entries: int,
    max_bytes: int,
) -> pb.AddFrame:
    pieces, sent = build_frame(batches, lacs, forces, max_entries, max_bytes, ENCODER)
    frame = pb.AddFrame.FromString(b"".join(pieces))
    assert [b.batch_id for b in frame.batches] == [b.batch_id for b in sent]
    return frame


def _ids(frame: pb.AddFrame) -> list[int]:
    return [entry[0] for batch in frame.batches for entry in unpack_entries(batch.entries)[0]]


def test_a_batch_holds_at_most_max_frame_entries_adds_in_order() -> None:
    batches = _queued(5, max_entries=2)
    assert [len(b.entry_ids) for b in batches] == [2, 2, 1]
    first = _frame(batches, [], [], 2, 1 << 20)
    assert _ids(first) == [0, 1]
    assert _ids(_frame(batches, [], [], 2, 1 << 20)) == [2, 3]
    assert len(batches) == 1


def test_a_batch_takes_adds_while_they_fit_in_max_frame_bytes() -> None:
    assert [len(b.entry_ids) for b in _queued(5, size=100, max_bytes=250)] == [2, 2, 1]
    # One add larger than the byte limit still travels, alone.
    assert [len(b.entry_ids) for b in _queued(2, size=1000, max_bytes=250)] == [1, 1]


def test_a_frame_takes_whole_batches_up_to_its_limits() -> None:
    batches = _queued(6, max_entries=2)
    frame = _frame(batches, [], [], 4, 1 << 20)
    assert _ids(frame) == [0, 1, 2, 3]
    assert len(frame.batches) == 2


def test_adds_of_another_ledger_key_or_durability_start_a_new_batch() -> None:
    batches: collections.deque[PendingBatch] = collections.deque()
    for ledger, key, recovery, durability in [
        (1, KEY, False, pb.PERSISTENT),
        (1, KEY, False, pb.PERSISTENT),
        (2, KEY, False, pb.PERSISTENT),
        (2, b"o" * 32, False, pb.PERSISTENT),
        (2, b"o" * 32, True, pb.PERSISTENT),
        (2, b"o" * 32, True, pb.VOLATILE),
    ]:
        _queue(batches, [_Out(0, -1, b"x", 0)], ledger, key, recovery, durability)
    assert [len(b.entry_ids) for b in batches] == [2, 1, 1, 1, 1]
    # Another callback (another writer's, or a single add's) starts a batch of its own.
    _queue(batches, [_Out(1, 0, b"x", 0)], 2, b"o" * 32, True, pb.VOLATILE, _other)
    assert [len(b.entry_ids) for b in batches] == [2, 1, 1, 1, 1, 1]


def test_lac_updates_and_forces_wait_for_the_frame_with_the_last_queued_add() -> None:
    batches = _queued(3, max_entries=2)
    lacs = [(1, 1, KEY)]
    forces = [(1, 9, KEY)]
    first = _frame(batches, lacs, forces, 2, 1 << 20)
    assert not first.lacs and not first.forces
    second = _frame(batches, lacs, forces, 2, 1 << 20)
    assert _ids(second) == [2]
    assert [f.request_id for f in second.forces] == [9]
    assert [u.lac for u in second.lacs] == [1]
    assert not lacs and not forces


def test_a_batch_carries_entry_fields_and_digest() -> None:
    batches: collections.deque[PendingBatch] = collections.deque()
    _queue(batches, [_Out(3, 2, b"data", 1234)], 7, KEY, True, pb.VOLATILE)
    (batch,) = _frame(batches, [], [], 10, 100).batches
    assert (batch.ledger_id, batch.master_key, batch.recovery, batch.durability) == (
        7,
        KEY,
        True,
        pb.VOLATILE,
    )
    assert unpack_entries(batch.entries) == ([(3, 2, 1234, b"data")], None)


def test_entries_are_packed_in_chunks_that_fit_in_a_frame() -> None:
    entries = [_Out(e, e - 1, b"x" * 100, 7) for e in range(7)]
    chunks = PackedEntries.chunks(entries, max_entries=3, max_bytes=1 << 20)
    assert [c.entry_ids for c in chunks] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [c.payload_bytes for c in chunks] == [300, 300, 100]
    by_bytes = PackedEntries.chunks(entries, max_entries=100, max_bytes=250)
    assert [len(c.entry_ids) for c in by_bytes] == [3, 3, 1]
    unpacked = [e for c in chunks for e in unpack_entries(c.blob)[0]]
    assert unpacked == [(e.entry_id, e.lac, e.digest, e.data) for e in entries]


def test_packed_entries_round_trip_and_a_torn_tail_is_named() -> None:
    blob = ENTRY_HEADER.pack(0, -1, 5, 3) + b"abc" + ENTRY_HEADER.pack(1, 0, 6, 0)
    assert unpack_entries(blob) == ([(0, -1, 5, b"abc"), (1, 0, 6, b"")], None)
    entries, problem = unpack_entries(blob + b"\x01\x02")
    assert len(entries) == 2 and problem == "2 stray bytes after 2 entries"
    entries, problem = unpack_entries(ENTRY_HEADER.pack(4, 3, 0, 10) + b"short")
    assert entries == [] and problem == "entry 4 claims 10 bytes, 5 left"


def _entry(ledger: int, entry: int, data: bytes, digest: int | None = None) -> pb.Entry:
    lac = entry - 1
    real = entry_digest(ledger, entry, lac, data)
    return pb.Entry(
        ledger_id=ledger,
        entry_id=entry,
        lac=lac,
        data=data,
        digest=real if digest is None else digest,
    )


def test_read_entries_with_good_digests_are_served() -> None:
    entries, ok = verified_entries("b", 4, 0, [_entry(4, 0, b"a"), _entry(4, 1, b"b")])
    assert ok
    assert [(e.entry_id, e.data, e.lac) for e in entries] == [(0, b"a", -1), (1, b"b", 0)]


def test_digest_mismatch_is_never_served_as_data() -> None:
    entries, ok = verified_entries("b", 4, 0, [_entry(4, 0, b"a"), _entry(4, 1, b"b", digest=1)])
    assert not ok
    assert [e.entry_id for e in entries] == [0]  # only the verified prefix
    entries, ok = verified_entries("b", 4, 0, [_entry(4, 0, b"a", digest=1)])
    assert (entries, ok) == ([], False)


def test_entry_of_another_ledger_or_position_is_refused() -> None:
    assert verified_entries("b", 4, 0, [_entry(5, 0, b"a")]) == ([], False)
    assert verified_entries("b", 4, 0, [_entry(4, 1, b"a")]) == ([], False)


def test_a_large_batch_is_encoded_once_and_sent_as_the_same_bytes_to_every_bookie() -> None:
    encoder = BatchEncoder()
    entries = [_Out(e, e - 1, b"x" * 1024, e) for e in range(SHARED_BATCH_BYTES // 1024)]
    packed = PackedEntries.pack(entries)
    streams: list[collections.deque[PendingBatch]] = [collections.deque() for _ in range(3)]
    for batches in streams:  # one bookie's stream after the other, as the writer does
        queue_packed(
            batches, 1, KEY, False, pb.PERSISTENT, _ignore, packed, 0.0, 512, 1 << 22, encoder
        )
    frames = [build_frame(b, [], [], 512, 1 << 22, encoder) for b in streams]
    ((piece,), _), ((second,), _), ((third,), _) = frames
    assert piece is second is third  # no copy per bookie
    assert len({sent[0].batch_id for _, sent in frames}) == 1
    (batch,) = pb.AddFrame.FromString(piece).batches
    assert (batch.ledger_id, batch.master_key, batch.batch_id) == (1, KEY, frames[0][1][0].batch_id)
    assert batch.entries == packed.blob
    # Smaller adds still merge on each stream, under ids of their own.
    small = collections.deque[PendingBatch]()
    _queue(small, entries[:2])
    _, (merged,) = build_frame(small, [], [], 512, 1 << 22, encoder)
    assert merged.batch_id != frames[0][1][0].batch_id and merged.entry_ids == [0, 1]


def test_small_packed_adds_that_travel_alone_are_encoded_once_for_every_bookie() -> None:
    encoder = BatchEncoder()
    packed = PackedEntries.pack([_Out(0, -1, b"small", 7)])
    streams: list[collections.deque[PendingBatch]] = [collections.deque() for _ in range(3)]
    for batches in streams:  # one bookie's stream after the other, as the writer does
        queue_packed(
            batches, 1, KEY, False, pb.PERSISTENT, _ignore, packed, 0.0, 512, 1 << 22, encoder
        )
    frames = [build_frame(b, [], [], 512, 1 << 22, encoder) for b in streams]
    ((piece,), _), ((second,), _), ((third,), _) = frames
    assert piece is second is third
    assert len({sent[0].batch_id for _, sent in frames}) == 1
    # Merged with more adds on a stream, they get an id and an encoding of their own.
    merged_queue = collections.deque[PendingBatch]()
    for more in (packed, PackedEntries.pack([_Out(1, 0, b"more", 8)])):
        queue_packed(
            merged_queue, 1, KEY, False, pb.PERSISTENT, _ignore, more, 0.0, 512, 1 << 22, encoder
        )
    _, (merged,) = build_frame(merged_queue, [], [], 512, 1 << 22, encoder)
    assert merged.entry_ids == [0, 1] and merged.batch_id != frames[0][1][0].batch_id

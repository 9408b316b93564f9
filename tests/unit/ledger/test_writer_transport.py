"""Pure parts of the gRPC transport the writer relies on: frames and read verification."""

from __future__ import annotations

import collections

from walog.digest import entry_digest
from walog.proto import bookie_pb2 as pb
from walog.transport.wire import QueuedAdd, build_frame, verified_entries


def _adds(count: int, size: int = 10) -> collections.deque[QueuedAdd]:
    return collections.deque(
        (1, e, e - 1, b"x" * size, 0, b"k" * 32, False, pb.PERSISTENT) for e in range(count)
    )


def test_frame_holds_at_most_max_frame_entries_adds_in_order() -> None:
    adds = _adds(5)
    first = build_frame(adds, [], [], 2, 1 << 20)
    assert [a.entry.entry_id for a in first.adds] == [0, 1]
    second = build_frame(adds, [], [], 2, 1 << 20)
    assert [a.entry.entry_id for a in second.adds] == [2, 3]
    assert len(adds) == 1


def test_frame_closes_once_it_holds_max_frame_bytes() -> None:
    adds = _adds(5, size=100)
    assert len(build_frame(adds, [], [], 100, 250).adds) == 3
    # One add larger than the byte limit still travels, alone.
    big = _adds(2, size=1000)
    assert len(build_frame(big, [], [], 100, 250).adds) == 1


def test_lac_updates_and_forces_wait_for_the_frame_with_the_last_queued_add() -> None:
    adds = _adds(3)
    lacs = [(1, 1, b"k" * 32)]
    forces = [(1, 9, b"k" * 32)]
    first = build_frame(adds, lacs, forces, 2, 1 << 20)
    assert not first.lacs and not first.forces
    second = build_frame(adds, lacs, forces, 2, 1 << 20)
    assert [a.entry.entry_id for a in second.adds] == [2]
    assert [f.request_id for f in second.forces] == [9]
    assert [u.lac for u in second.lacs] == [1]
    assert not lacs and not forces


def test_frame_carries_entry_fields_and_digest() -> None:
    adds: collections.deque[QueuedAdd] = collections.deque(
        [(7, 3, 2, b"data", 1234, b"k" * 32, True, pb.VOLATILE)]
    )
    frame = build_frame(adds, [], [], 10, 100)
    add = frame.adds[0]
    assert (add.entry.ledger_id, add.entry.entry_id, add.entry.lac) == (7, 3, 2)
    assert (add.entry.data, add.entry.digest, add.recovery, add.durability) == (
        b"data",
        1234,
        True,
        pb.VOLATILE,
    )


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

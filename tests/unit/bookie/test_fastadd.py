"""The add path's per-entry checks, compiled (bookie/storage/_fastadd.c) and pure Python
(:func:`walog.wire.packing.unpack_entries`, :func:`bookie.storage.fastpath.refused_entries_python`):
the same entries, problems and refusals, exceptions included, for well-formed, random and
hostile input.

The compiled module must be built here (``pip install -e .``): these tests fail, not skip,
when it is not. The other bookie tests run with whichever code bookie/storage/fastpath.py selected
(``WALOG_PURE_PYTHON=1`` picks pure Python); ./test runs them both ways.
"""

from __future__ import annotations

import enum
import random
import struct
from collections.abc import Iterator
from typing import Any

import pytest

import bookie.server.add_stream
import bookie.storage.engine
import bookie.storage.replay
from bookie.storage import fastpath
from bookie.storage.fastpath import refused_entries_python
from tests.unit.bookie.helpers import compiled_add_module, probe_pure_python
from walog.wire.digest import entry_digest
from walog.wire.packing import ENTRY_HEADER, PackedEntry, unpack_entries
from walog.wire.status import Status

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
Packed = tuple[int, int, int, bytes]


def outcome(call: Any, *args: Any) -> tuple[str, Any]:
    """What ``call(*args)`` returns, or the type of what it raises."""
    try:
        return "returned", call(*args)
    except Exception as exc:
        return "raised", type(exc)


# -- unpack_entries -------------------------------------------------------------------------


def pack(entries: list[tuple[int, int, int, bytes]]) -> bytes:
    return b"".join(ENTRY_HEADER.pack(e, lac, d, len(data)) + data for e, lac, d, data in entries)


def random_packed(rng: random.Random, count: int) -> list[Packed]:
    ids = [INT64_MIN, -1, 0, 1, INT64_MAX]
    return [
        (
            rng.choice([*ids, rng.randint(INT64_MIN, INT64_MAX)]),
            rng.choice([*ids, rng.randint(-5, 5)]),
            rng.choice([0, 1, (1 << 32) - 1, rng.getrandbits(32)]),
            rng.randbytes(rng.choice([0, 0, 1, 7, 8, 9, 23, 24, 25, rng.randint(0, 2000)])),
        )
        for _ in range(count)
    ]


def assert_unpacked_alike(blob: Any) -> None:
    fast = compiled_add_module()
    want = outcome(unpack_entries, blob)
    got = outcome(fast.unpack_entries, blob)
    assert got == want
    if want[0] == "returned":  # the same types too: ints, and slices of the blob's type
        for mine, theirs in zip(got[1][0], want[1][0], strict=True):
            assert type(mine) is type(theirs)
            assert [type(x) for x in mine] == [type(x) for x in theirs]


def test_well_formed_batches_unpack_alike() -> None:
    rng = random.Random(1)
    for count in [0, 1, 2, 3, 10, 512]:
        entries = random_packed(rng, count)
        blob = pack(entries)
        assert unpack_entries(blob) == (entries, None)
        assert_unpacked_alike(blob)


def test_every_truncation_of_a_batch_unpacks_alike() -> None:
    rng = random.Random(2)
    blob = pack(random_packed(rng, 6))
    for end in range(len(blob) + 1):
        assert_unpacked_alike(blob[:end])
        assert_unpacked_alike(blob[:end] + b"\x00" * rng.randint(1, 30))


def test_lengths_past_the_end_unpack_alike() -> None:
    body = b"x" * 40
    for length in [0, 39, 40, 41, 1 << 31, (1 << 32) - 1]:
        for entry_id in [INT64_MIN, -1, 0, INT64_MAX]:
            blob = ENTRY_HEADER.pack(entry_id, 0, 0, length) + body
            assert_unpacked_alike(blob)
            assert_unpacked_alike(pack([(1, 0, 2, b"ok")]) + blob)
    entries, problem = compiled_add_module().unpack_entries(
        pack([(1, 0, 2, b"ok")]) + ENTRY_HEADER.pack(-5, 0, 0, (1 << 32) - 1) + b"abc"
    )
    assert entries == [(1, 0, 2, b"ok")]
    assert problem == "entry -5 claims 4294967295 bytes, 3 left"


def test_random_and_damaged_blobs_unpack_alike() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        blob = bytearray(pack(random_packed(rng, rng.randint(0, 5))))
        for _ in range(rng.randint(0, 3)):  # damage: flip bytes, cut, or add garbage
            choice = rng.random()
            if blob and choice < 0.5:
                blob[rng.randrange(len(blob))] = rng.getrandbits(8)
            elif choice < 0.75:
                del blob[rng.randint(0, len(blob)) :]
            else:
                blob += rng.randbytes(rng.randint(1, 40))
        assert_unpacked_alike(bytes(blob))
        assert_unpacked_alike(rng.randbytes(rng.randint(0, 100)))


def test_other_buffers_unpack_alike_into_slices_of_their_type() -> None:
    class Blob(bytes):
        pass

    blob = pack([(0, -1, 5, b"abc"), (1, 0, 6, b"")]) + b"\x01"
    for kind in (bytearray, memoryview, Blob):
        assert_unpacked_alike(kind(blob))
    entries, _ = compiled_add_module().unpack_entries(memoryview(blob))
    assert [bytes(e[3]) for e in entries] == [b"abc", b""]
    assert type(entries[0][3]) is memoryview


def test_the_compiled_unpack_refuses_what_is_not_a_buffer_of_bytes() -> None:
    fast = compiled_add_module()
    with pytest.raises(TypeError):
        fast.unpack_entries("x" * 30)
    with pytest.raises(TypeError):
        fast.unpack_entries([1, 2, 3])
    with pytest.raises(TypeError):  # items of 4 bytes: slices would not be byte offsets
        fast.unpack_entries(memoryview(bytes(48)).cast("i"))
    with pytest.raises(TypeError):
        fast.unpack_entries()


def test_unpacked_entries_travel_as_packed_entries_on_both_paths() -> None:
    blob = pack([(3, 2, 7, b"abc"), (4, 3, 8, b"")]) + b"\x01"
    for unpack in (unpack_entries, compiled_add_module().unpack_entries):
        entries, problem = unpack(blob)
        assert problem is not None
        assert [type(entry) for entry in entries] == [PackedEntry, PackedEntry]
        first = entries[0]
        assert (first.entry_id, first.lac, first.digest, first.data) == (3, 2, 7, b"abc")
        assert first._replace(lac=-1) == (3, -1, 7, b"abc")  # a whole named tuple


# -- refused_entries ------------------------------------------------------------------------


def refused_alike(ledger_id: Any, entries: Any, max_entry_bytes: Any) -> dict[Any, Status]:
    """Both refusals, which must be the same (same order too); returns them. ``entries``
    may be a function making them (an iterator, consumed by each)."""
    fast = compiled_add_module()
    make = entries if callable(entries) else lambda: entries
    want = outcome(refused_entries_python, ledger_id, make(), max_entry_bytes)
    got = outcome(
        fast.refused_entries,
        ledger_id,
        make(),
        max_entry_bytes,
        Status.BAD_REQUEST,
        Status.DIGEST_MISMATCH,
        Status.ENTRY_TOO_LARGE,
    )
    assert got == want
    if want[0] == "returned":
        assert list(got[1].items()) == list(want[1].items())
        return dict(want[1])
    return {}


def entry(ledger_id: int, entry_id: int, lac: int, data: bytes, *, wrong: bool = False) -> Any:
    digest = entry_digest(ledger_id, entry_id, lac, data)
    return entry_id, lac, digest ^ 1 if wrong else digest, data


def test_valid_entries_are_not_refused_by_either() -> None:
    rng = random.Random(4)
    entries = [entry(7, n, n - 1, rng.randbytes(rng.randint(0, 3000))) for n in range(600)]
    assert refused_alike(7, entries, 3000) == {}
    assert refused_alike(7, [], 0) == {}


def test_boundary_ids_lacs_digests_and_sizes_are_refused_alike() -> None:
    rng = random.Random(5)
    ids = [INT64_MIN, -2, -1, 0, 1, 2, 1000, INT64_MAX - 1, INT64_MAX]
    for ledger_id in [INT64_MIN, -1, 0, 5, INT64_MAX]:
        for max_entry_bytes in [-1, 0, 1, 16, 17, 1 << 70, -(1 << 70)]:
            entries = []
            for entry_id in ids:
                for lac in {INT64_MIN, -2, -1, 0, entry_id - 1, entry_id, entry_id + 1}:
                    if not INT64_MIN <= lac <= INT64_MAX:
                        continue
                    data = rng.randbytes(rng.choice([0, 15, 16, 17]))
                    good = entry(max(ledger_id, 0), entry_id, lac, data)
                    entries.append(good if ledger_id >= 0 else (*good[:3], data))
                    entries.append((entry_id, lac, good[2] ^ 1 << rng.randrange(32), data))
            refused_alike(ledger_id, entries, max_entry_bytes)


def test_digests_that_are_not_a_uint32_are_compared_alike() -> None:
    class Digest(enum.IntEnum):
        ZERO = 0

    data = b"payload"
    digest = entry_digest(3, 1, 0, data)
    for other in [digest + (1 << 32), digest - (1 << 32), -1, 1 << 80, "x", None, 1.0 * digest]:
        assert refused_alike(3, [(1, 0, other, data)], 100) == (
            {} if other == digest else {1: Status.DIGEST_MISMATCH}
        )
    assert refused_alike(3, [(1, 0, digest, data), (2, 1, Digest.ZERO, b"")], 100) == {
        2: Status.DIGEST_MISMATCH
    }
    assert refused_alike(3, [(1, 0, True, b"")], 100) == {1: Status.DIGEST_MISMATCH}


def test_random_batches_are_refused_alike() -> None:
    rng = random.Random(6)
    for _ in range(300):
        ledger_id = rng.choice([-1, 0, 1, rng.randint(0, INT64_MAX)])
        limit = rng.choice([0, 64, 1024])
        entries = []
        for entry_id in rng.sample(range(-3, 40), rng.randint(0, 20)):
            lac = rng.randint(-3, entry_id + 1)
            data = rng.randbytes(rng.choice([0, 63, 64, 65, 1023, 1024, 1025]))
            if rng.random() < 0.9:
                entries.append(entry(ledger_id, entry_id, lac, data, wrong=rng.random() < 0.3))
            else:
                entries.append((entry_id, lac, rng.getrandbits(32), data))
        refused_alike(ledger_id, entries, limit)


def test_a_repeated_entry_id_keeps_its_first_refusal_alike() -> None:
    good = entry(2, 5, 4, b"a")
    bad_digest = entry(2, 5, 4, b"a", wrong=True)
    bad_lac = (5, 5, 0, b"a")
    for batch in (
        [bad_lac, good],
        [good, bad_lac],
        [bad_digest, bad_lac],
        [bad_lac, bad_digest],
        [good, good],
    ):
        refused_alike(2, batch, 10)
    assert refused_alike(2, [entry(2, 1, 0, b""), bad_lac, bad_digest], 10) == {
        5: Status.DIGEST_MISMATCH
    }


def test_an_oversized_entry_is_refused_as_too_large_not_as_a_bad_request() -> None:
    entries = [entry(1, 0, -1, b"four"), entry(1, 1, 0, b"fiver"), (-1, -1, 0, b"fiver")]
    assert refused_alike(1, entries, 4) == {
        1: Status.ENTRY_TOO_LARGE,
        -1: Status.BAD_REQUEST,  # a malformed entry stays a bad request, whatever its size
    }


def test_ids_past_int64_are_refused_or_fail_alike() -> None:
    big, small = 1 << 64, -(1 << 64)
    for ledger_id, entries in [
        (small, [(0, -1, 0, b"")]),  # BAD_REQUEST: a negative ledger
        (big, [(0, -1, 0, b"")]),  # struct.error: the digest header cannot hold the ledger
        (big, [(0, 0, 0, b"")]),  # BAD_REQUEST before any digest
        (1, [(small, -1, 0, b"")]),
        (1, [(big, -1, 0, b"")]),
        (1, [(big, big + 1, 0, b"")]),
        (1, [(big + 1, big, 0, b"")]),
        (1, [(1, small, 0, b"")]),
        (1, [(1, big, 0, b"")]),
        (1, [(big, 0, 0, b"toolong")]),
    ]:
        refused_alike(ledger_id, entries, 3)
    with pytest.raises(struct.error):
        compiled_add_module().refused_entries(big, [(0, -1, 0, b"")], 3, 1, 2, 3)


def test_payloads_of_other_buffers_are_checked_alike() -> None:
    data = b"some bytes"
    entries = [
        entry(4, 0, -1, bytearray(data)),  # type: ignore[arg-type]
        entry(4, 1, 0, memoryview(data)),  # type: ignore[arg-type]
        (2, 1, 0, memoryview(data)),
        (3, 2, 0, bytearray(data)),
    ]
    assert refused_alike(4, entries, 100) == {2: Status.DIGEST_MISMATCH, 3: Status.DIGEST_MISMATCH}
    refused_alike(4, entries, 5)
    refused_alike(4, [(1, 0, 0, "not a buffer")], 100)
    refused_alike(4, [(1, 0, 0, 12)], 100)


def test_malformed_entries_fail_alike() -> None:
    def failing() -> Iterator[Packed]:
        yield entry(1, 0, -1, b"x")
        raise RuntimeError("boom")

    for entries in [
        [(1, 0, 0)],
        [(1, 0, 0, b"", 5)],
        [[1, 0, entry_digest(1, 1, 0, b""), b""]],
        [1],
        None,
        failing,
        lambda: iter([entry(1, 0, -1, b"x"), entry(1, 1, 0, b"yy", wrong=True)]),
    ]:
        refused_alike(1, entries, 10)
    with pytest.raises(RuntimeError, match="boom"):
        compiled_add_module().refused_entries(1, failing(), 10, 1, 2, 3)


def test_the_compiled_refusal_wants_int_ids_and_its_six_arguments() -> None:
    fast = compiled_add_module()
    for ledger_id, entries, limit in [
        (1.0, [], 1),
        (1, [(1.0, 0, 0, b"")], 1),
        (1, [(1, "0", 0, b"")], 1),
        (1, [], None),
    ]:
        with pytest.raises(TypeError):
            fast.refused_entries(ledger_id, entries, limit, 1, 2, 3)
    with pytest.raises(TypeError):
        fast.refused_entries(1, [], 1)


# -- selection --------------------------------------------------------------------------------


def test_the_bookie_uses_the_selected_checks() -> None:
    assert bookie.server.add_stream.unpack_entries is fastpath.unpack_entries
    assert bookie.storage.replay.unpack_entries is fastpath.unpack_entries
    assert bookie.storage.engine.refused_entries is fastpath.refused_entries
    if fastpath.COMPILED:
        assert fastpath.unpack_entries is compiled_add_module().unpack_entries
    else:
        assert fastpath.unpack_entries is unpack_entries
        assert fastpath.refused_entries is refused_entries_python


def test_the_compiled_checks_are_selected_unless_pure_python_is_asked_for() -> None:
    compiled_add_module()
    probe = (
        "import bookie.storage.fastpath as f, walog.wire.packing as p; "
        "print(f.COMPILED, f.unpack_entries is p.unpack_entries)"
    )
    seen = probe_pure_python(probe, (None, "0", "", "1", "yes"))
    compiled, pure = "True False", "False True"
    assert seen == {None: compiled, "0": compiled, "": compiled, "1": pure, "yes": pure}


def test_entries_changed_while_they_are_checked_are_refused_alike() -> None:
    """An entry's ``__len__`` (or ``__ne__``) is Python code: it may empty the list being
    checked, or the entry's own list; neither may make the compiled loop read freed items."""
    digest = entry_digest(1, 0, -1, b"ab")

    def outer() -> list[Any]:
        entries: list[Any] = []

        class Emptying(bytes):
            def __len__(self) -> int:
                entries.clear()
                return 2

        entries += [(0, -1, digest, Emptying(b"ab")), (1, 0, 0, b"cd"), (2, 1, 0, b"")]
        return entries

    def inner() -> list[Any]:
        entry: list[Any] = []

        class Emptying(bytes):
            def __len__(self) -> int:
                entry.clear()
                return 2

        entry += [0, -1, digest ^ 1, Emptying(b"ab")]
        return [entry, (1, 0, 0, b"cd")]

    class Shrinking:
        def __init__(self, entries: list[Any]) -> None:
            self.entries = entries

        def __ne__(self, other: object) -> bool:
            self.entries.clear()
            return True

    def by_digest() -> list[Any]:
        entries: list[Any] = []
        entries += [(0, -1, Shrinking(entries), b"ab"), (1, 0, 0, b"cd")]
        return entries

    assert refused_alike(1, outer, 10) == {}
    assert refused_alike(1, inner, 10) == {0: Status.DIGEST_MISMATCH, 1: Status.DIGEST_MISMATCH}
    assert refused_alike(1, by_digest, 10) == {0: Status.DIGEST_MISMATCH}


def test_subclasses_of_bytes_are_counted_and_sliced_alike() -> None:
    class Long(bytes):
        def __len__(self) -> int:
            return 1000

    class Sliced(bytes):
        def __getitem__(self, key: Any) -> Any:
            return b"sliced"

    data = b"ab"
    refused_alike(1, [(0, -1, entry_digest(1, 0, -1, data), Long(data))], 10)
    assert_unpacked_alike(Sliced(pack([(0, -1, 5, b"abc")])))
    with pytest.raises(TypeError):  # a length that is not its buffer's: no byte offsets
        compiled_add_module().unpack_entries(Long(pack([(0, -1, 5, b"abc")])))

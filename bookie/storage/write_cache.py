"""The write cache: the entries a bookie took since its last checkpoint, held as the
batches they arrived in.

A :class:`Unit` is one batch of one ledger's entries, kept as the bytes they were
journaled as (walog/wire/packing.py: a 24-byte header ``entry_id:int64 lac:int64
digest:uint32 length:uint32`` then the payload, entry after entry) with two compact arrays
beside them: the entry ids, ascending, and where each entry starts. An add batch of a
thousand entries is one bytes object and two arrays here, not a thousand tuples in a dict;
a checkpoint writes a unit's bytes to the entry log as they are
(bookie/storage/entry_log_writer.py), and a read out of the cache finds its entry with two
binary searches.

The units of a ledger cover disjoint id ranges, in order. Entries arrive in ascending
batches almost always; one that falls inside another unit's range (a recovery write
filling a gap, entries re-replicated while new ones arrive) splits the units it
interleaves with into pieces that share their bytes.

Memory only; the event loop's thread owns it (the checkpoint freezes one and persists it
in the storage thread, which only reads it).
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Iterable, Iterator, Sequence

from walog.wire.packing import ENTRY_HEADER

CachedEntry = tuple[int, int, bytes]
"""An entry as the cache answers it: ``(lac, digest, data)``."""

_HEADER = ENTRY_HEADER.size
_SMALL_UNIT_BYTES = 8 << 10  # units up to this size are copied onto a ledger's tail
# A tail is a bytearray of fixed size, filled from its start: appending never reallocates
# (a bytearray grown by += is copied again at each of its reallocations). A ledger's first
# tail holds just the batch that starts it (a ledger written once per checkpoint wastes
# nothing), each next one twice the last, up to the largest.
_LARGEST_TAIL_BYTES = 1 << 20
ENTRY_OVERHEAD_BYTES = 32
"""What the cache counts per entry besides its payload: its header and its two array
slots (the figure write_cache_bytes is measured in, as before units)."""


class Unit:
    """Entries of one ledger packed back to back in ``blob[starts[0]:stop]``, ids
    ascending. Immutable once made; pieces of it share its bytes."""

    __slots__ = ("blob", "first", "ids", "last", "starts", "stop")

    def __init__(
        self, blob: bytes | bytearray, ids: array[int], starts: array[int], stop: int
    ) -> None:
        self.blob = blob
        self.ids = ids
        self.starts = starts
        self.stop = stop
        self.first = ids[0]
        """The lowest entry id."""
        self.last = ids[-1]
        """The highest entry id."""

    @property
    def nbytes(self) -> int:
        """The packed entries' bytes (headers included)."""
        return self.stop - self.starts[0]

    def end(self, index: int) -> int:
        """Where entry ``index`` ends in :attr:`blob` (``index`` may be past the last)."""
        return self.starts[index + 1] if index + 1 < len(self.starts) else self.stop

    def index(self, entry_id: int) -> int:
        """Where ``entry_id`` is in :attr:`ids`; -1 when it is not here."""
        first, ids = self.first, self.ids
        if entry_id < first or entry_id > self.last:
            return -1
        if self.last - first == len(ids) - 1:  # consecutive
            return entry_id - first
        i = bisect.bisect_left(ids, entry_id)
        return i if ids[i] == entry_id else -1

    def lengths(self, begin: int, end: int) -> list[int]:
        """The packed lengths of entries ``begin..end-1``."""
        starts = self.starts
        if end - begin == 1:
            return [self.end(begin) - starts[begin]]
        following = [*starts[begin + 1 : end], self.end(end - 1)]
        return [after - start for start, after in zip(starts[begin:end], following, strict=True)]

    def piece(self, begin: int, end: int) -> Unit:
        """Entries ``begin..end-1`` as a unit sharing these bytes."""
        if begin == 0 and end == len(self.ids):
            return self
        return Unit(self.blob, self.ids[begin:end], self.starts[begin:end], self.end(end - 1))

    def window(self, begin: int, end: int) -> memoryview:
        """The packed bytes of entries ``begin..end-1``."""
        return memoryview(self.blob)[self.starts[begin] : self.end(end - 1)]


def starts_of(sizes: Sequence[int]) -> tuple[array[int], int]:
    """Where packed entries of payload ``sizes`` start, back to back from 0, and where the
    last one ends."""
    if len(sizes) == 1:  # an add of one entry: the usual case at low rates
        return array("q", (0,)), _HEADER + sizes[0]
    starts = array("q", itertools.accumulate((_HEADER + size for size in sizes), initial=0))
    return starts, starts.pop()


def unit_of_packed(blob: bytes, ids: Sequence[int], sizes: Sequence[int]) -> Unit:
    """The unit of ``blob``, the packed entries ``ids`` (ascending) of payload ``sizes``
    in that order and nothing else."""
    starts, stop = starts_of(sizes)
    if stop != len(blob):
        raise ValueError(f"packed entries of {stop} bytes in a blob of {len(blob)}")
    return Unit(blob, array("q", ids), starts, stop)


def pack_unit(entries: Iterable[tuple[int, int, int, bytes | memoryview]]) -> Unit:
    """A unit of ``(entry_id, lac, digest, data)`` entries in any order (the first of
    entries with the same id)."""
    first: dict[int, tuple[int, int, int, bytes | memoryview]] = {}
    for entry in entries:
        first.setdefault(entry[0], entry)
    ordered = [first[entry_id] for entry_id in sorted(first)]
    blob = b"".join(
        part
        for entry_id, lac, digest, data in ordered
        for part in (ENTRY_HEADER.pack(entry_id, lac, digest, len(data)), data)
    )
    return unit_of_packed(blob, [entry[0] for entry in ordered], [len(e[3]) for e in ordered])


def repacked(blob: bytes | memoryview, starts: Iterable[int]) -> Unit:
    """The packed entries starting at ``starts`` in ``blob``, copied into a unit of their
    own (ids from their headers)."""
    view = memoryview(blob)
    entries = []
    for start in starts:
        entry_id, lac, digest, length = ENTRY_HEADER.unpack_from(view, start)
        entries.append((entry_id, lac, digest, view[start + _HEADER : start + _HEADER + length]))
    return pack_unit(entries)


def pieces_of(entries: Iterable[tuple[int, int, CachedEntry]]) -> list[tuple[int, Unit]]:
    """``(ledger, entry, (lac, digest, data))`` entries as units, one per stretch of one
    ledger's entries (what a checkpoint or compaction writes)."""
    return [
        (
            ledger_id,
            pack_unit((entry_id, lac, digest, data) for _, entry_id, (lac, digest, data) in group),
        )
        for ledger_id, group in itertools.groupby(entries, key=lambda entry: entry[0])
    ]


class _Ledger:
    """One ledger's units, by first id, kept as parallel lists of ints, bytes and arrays:
    objects the garbage collector does not track, so a cache of a million entries costs
    its full collections nothing. The last unit may be a *tail*: a bytearray that small
    units arriving in order are copied onto, so that adds of one entry at a time make one
    unit, not one each."""

    __slots__ = ("blobs", "firsts", "idss", "lasts", "startss", "stops")

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.blobs: list[bytes | bytearray] = []
        self.idss: list[array[int]] = []
        self.startss: list[array[int]] = []
        self.stops: list[int] = []

    def unit(self, at: int) -> Unit:
        """Unit ``at`` (a view of the lists; the tail may grow after)."""
        ids, starts = self.idss[at], self.startss[at]
        return Unit(self.blobs[at], ids[:], starts[:], self.stops[at])

    def find(self, entry_id: int) -> tuple[int, int] | None:
        """``(unit, index there)`` of ``entry_id``; None when it is not here."""
        at = bisect.bisect_right(self.firsts, entry_id) - 1
        if at < 0 or entry_id > self.lasts[at]:
            return None
        first, ids = self.firsts[at], self.idss[at]
        if self.lasts[at] - first == len(ids) - 1:  # consecutive
            return at, entry_id - first
        index = bisect.bisect_left(ids, entry_id)
        return (at, index) if ids[index] == entry_id else None

    def entry(self, at: int, index: int) -> CachedEntry:
        """The ``(lac, digest, data)`` of entry ``index`` of unit ``at``."""
        blob, start = self.blobs[at], self.startss[at][index]
        _, lac, digest, length = ENTRY_HEADER.unpack_from(blob, start)
        return lac, digest, bytes(blob[start + _HEADER : start + _HEADER + length])

    def append(self, unit: Unit) -> None:
        """Add ``unit``, whose ids all follow the last unit's."""
        size = unit.stop - unit.starts[0]
        if size > _SMALL_UNIT_BYTES:  # kept as it came, not copied
            self.put(len(self.firsts), unit.blob, unit.ids, unit.starts, unit.stop, unit.last)
            return
        tail, at = self.tail_room(size, unit.first)
        with memoryview(unit.blob) as whole, whole[unit.starts[0] : unit.stop] as window:
            tail[at : at + size] = window  # the same length: never a reallocation
        shift = at - unit.starts[0]
        self.idss[-1].extend(unit.ids)
        starts = self.startss[-1]
        if len(unit.ids) == 1:
            starts.append(unit.starts[0] + shift)
        else:
            starts.extend(start + shift for start in unit.starts)
        self.stops[-1] = at + size
        self.lasts[-1] = unit.last

    def tail_room(self, size: int, first: int) -> tuple[bytearray, int]:
        """The ledger's tail and where ``size`` more bytes go in it, from entry ``first``
        on: a new tail when the last unit is not one or is full (an empty unit until the
        caller fills it: its ids, starts, stop and last)."""
        blob = self.blobs[-1] if self.blobs else b""
        if isinstance(blob, bytearray) and self.stops[-1] + size <= len(blob):
            return blob, self.stops[-1]
        grown = 2 * len(blob) if isinstance(blob, bytearray) else 0
        tail = bytearray(max(min(grown, _LARGEST_TAIL_BYTES), size))
        self.firsts.append(first)
        self.lasts.append(first)
        self.blobs.append(tail)
        self.idss.append(array("q"))
        self.startss.append(array("q"))
        self.stops.append(0)
        return tail, 0

    def put(
        self,
        at: int,
        blob: bytes | bytearray,
        ids: array[int],
        starts: array[int],
        stop: int,
        last: int,
    ) -> None:
        """Place a unit's fields at ``at`` in the lists (kept as given, not copied)."""
        self.firsts.insert(at, ids[0])
        self.lasts.insert(at, last)
        self.blobs.insert(at, blob)
        self.idss.insert(at, ids)
        self.startss.insert(at, starts)
        self.stops.insert(at, stop)

    def insert(self, unit: Unit) -> list[int]:
        """Add ``unit`` anywhere; returns the ids it held that were here already (not
        added)."""
        firsts, lasts = self.firsts, self.lasts
        at = bisect.bisect_left(firsts, unit.first)
        low = at - 1 if at > 0 and lasts[at - 1] >= unit.first else at
        high = at
        while high < len(firsts) and firsts[high] <= unit.last:
            high += 1
        if low == high:  # no range overlaps
            self.put(at, unit.blob, unit.ids, unit.starts, unit.stop, unit.last)
            return []
        pieces, repeated = _interleave([*(self.unit(i) for i in range(low, high)), unit])
        for parallel in (self.firsts, self.lasts, self.blobs, self.idss, self.startss):
            del parallel[low:high]
        del self.stops[low:high]
        for offset, piece in enumerate(pieces):
            self.put(low + offset, piece.blob, piece.ids, piece.starts, piece.stop, piece.last)
        return repeated


def _counted(packed_bytes: int, count: int) -> int:
    """What :attr:`WriteCache.bytes` counts for ``count`` entries packed in
    ``packed_bytes``: their payloads plus :data:`ENTRY_OVERHEAD_BYTES` each."""
    return packed_bytes + count * (ENTRY_OVERHEAD_BYTES - _HEADER)


def _interleave(units: list[Unit]) -> tuple[list[Unit], list[int]]:
    """Units with overlapping ranges cut into pieces of disjoint ranges, in order, holding
    every id once (the earliest unit's copy of a repeated id); and the repeated ids."""
    order = sorted(
        (entry_id, source, index)
        for source, unit in enumerate(units)
        for index, entry_id in enumerate(unit.ids)
    )
    pieces: list[Unit] = []
    repeated: list[int] = []
    run_source = run_begin = run_next = -1
    previous = None
    for entry_id, source, index in order:
        if entry_id == previous:
            repeated.append(entry_id)
            continue
        previous = entry_id
        if source != run_source or index != run_next:
            if run_source >= 0:
                pieces.append(units[run_source].piece(run_begin, run_next))
            run_source, run_begin = source, index
        run_next = index + 1
    pieces.append(units[run_source].piece(run_begin, run_next))
    return pieces, repeated


class WriteCache:
    """Entries taken since the last checkpoint, by ledger, as units (memory only)."""

    def __init__(self) -> None:
        self.ledgers: dict[int, _Ledger] = {}
        self.bytes = 0
        """The cached entries' payloads plus :data:`ENTRY_OVERHEAD_BYTES` per entry."""
        self.count = 0
        """The cached entries."""

    def add(self, ledger_id: int, unit: Unit) -> int:
        """Cache a unit; an id already cached keeps its first copy. Returns how many of the
        unit's entries were new."""
        ledger = self.ledgers.get(ledger_id)
        if ledger is None:
            ledger = self.ledgers[ledger_id] = _Ledger()
        if not ledger.lasts or ledger.lasts[-1] < unit.first:  # the usual case
            ledger.append(unit)
            repeated = []
        else:
            repeated = ledger.insert(unit)
        count = len(unit.ids)
        added = count - len(repeated)
        # The payload bytes: the packed ones less their headers, plus the overhead.
        size = _counted(unit.stop - unit.starts[0], count)
        for entry_id in repeated:
            index = unit.index(entry_id)
            size -= _counted(unit.end(index) - unit.starts[index], 1)
        self.bytes += size
        self.count += added
        return added

    def add_packed(
        self,
        ledger_id: int,
        blob: bytes | memoryview,
        ids: Sequence[int],
        starts: array[int],
    ) -> None:
        """Cache the packed entries ``ids`` (ascending, none cached) that make up ``blob``
        exactly, entry ``i`` from ``starts[i]``: the call of the add path and of replay. A
        batch after the ledger's other entries is copied onto its tail when small, else
        kept as it is (a memoryview copied once), without making a unit."""
        ledger = self.ledgers.get(ledger_id)
        size, count = len(blob), len(ids)
        if ledger is not None and ledger.lasts[-1] >= ids[0]:
            self.add(ledger_id, Unit(bytes(blob), array("q", ids), starts, size))
            return
        if ledger is None:
            ledger = self.ledgers[ledger_id] = _Ledger()
        self.bytes += _counted(size, count)
        self.count += count
        if size > _SMALL_UNIT_BYTES:
            owned = blob if isinstance(blob, bytes) else bytes(blob)
            ledger.put(len(ledger.firsts), owned, array("q", ids), starts, size, ids[-1])
            return
        tail, at = ledger.tail_room(size, ids[0])
        tail[at : at + size] = blob
        ledger.idss[-1].extend(ids)
        if count == 1:
            ledger.startss[-1].append(at)
        else:
            ledger.startss[-1].extend(start + at for start in starts)
        ledger.stops[-1] = at + size
        ledger.lasts[-1] = ids[-1]

    def put(self, ledger_id: int, entry_id: int, entry: CachedEntry) -> bool:
        """Cache one entry; False (and no change) when it is cached already."""
        lac, digest, data = entry
        return self.add(ledger_id, pack_unit([(entry_id, lac, digest, data)])) == 1

    def get(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        """The cached entry or None."""
        ledger = self.ledgers.get(ledger_id)
        found = None if ledger is None else ledger.find(entry_id)
        return None if found is None or ledger is None else ledger.entry(*found)

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        """True when the entry is cached."""
        ledger = self.ledgers.get(ledger_id)
        return ledger is not None and ledger.find(entry_id) is not None

    def ids_in(self, ledger_id: int, first: int, last: int) -> list[int]:
        """The cached ids of the ledger in ``first..last``, ascending."""
        ledger = self.ledgers.get(ledger_id)
        if ledger is None:
            return []
        ids: list[int] = []
        at = max(bisect.bisect_right(ledger.firsts, first) - 1, 0)
        for unit_first, unit_ids in zip(ledger.firsts[at:], ledger.idss[at:], strict=True):
            if unit_first > last:
                break
            low, high = bisect.bisect_left(unit_ids, first), bisect.bisect_right(unit_ids, last)
            ids += unit_ids[low:high]
        return ids

    def last_id(self, ledger_id: int) -> int:
        """The highest cached id of the ledger; -1 when none."""
        ledger = self.ledgers.get(ledger_id)
        return ledger.lasts[-1] if ledger is not None and ledger.lasts else -1

    def units(self, ledger_id: int) -> list[Unit]:
        """The ledger's units, in id order."""
        ledger = self.ledgers.get(ledger_id)
        return [] if ledger is None else [ledger.unit(at) for at in range(len(ledger.firsts))]

    def pieces(self) -> Iterator[tuple[int, Unit]]:
        """Every unit with its ledger, by ledger then id (a checkpoint writes them so)."""
        for ledger_id in sorted(self.ledgers):
            ledger = self.ledgers[ledger_id]
            for at in range(len(ledger.firsts)):
                yield ledger_id, ledger.unit(at)

    def snapshot(self) -> dict[int, dict[int, CachedEntry]]:
        """Every cached entry by ledger and id (for checks and tests: it copies them all)."""
        return {
            ledger_id: {
                entry_id: ledger.entry(at, index)
                for at, ids in enumerate(ledger.idss)
                for index, entry_id in enumerate(ids)
            }
            for ledger_id, ledger in self.ledgers.items()
        }

    def drop_ledger(self, ledger_id: int) -> None:
        """Forget a ledger's entries."""
        ledger = self.ledgers.pop(ledger_id, None)
        if ledger is not None:
            for ids, starts, stop in zip(ledger.idss, ledger.startss, ledger.stops, strict=True):
                self.bytes -= _counted(stop - starts[0], len(ids))
                self.count -= len(ids)


__all__ = [
    "ENTRY_OVERHEAD_BYTES",
    "CachedEntry",
    "Unit",
    "WriteCache",
    "pack_unit",
    "pieces_of",
    "repacked",
    "unit_of_packed",
]

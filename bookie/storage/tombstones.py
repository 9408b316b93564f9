"""The ledgers a bookie deleted, remembered for good as fenced (docs/protocol.md, "Fencing").

A fence protects a closed ledger only while a bookie remembers it. Deleting a ledger (its
metadata was deleted, or its copy here is stray) used to drop its fence with its entries,
so a writer that never learnt of the deletion (a zombie) could recreate the ledger on
that bookie with a plain add and be acknowledged by enough such bookies: an entry
"written" to a ledger the cluster no longer has. Ledger ids are never reused (they come
from a counter in the metadata store), so a bookie keeps the id of every ledger it
deleted and answers a plain add to it FENCED; a fence or a recovery write (an
auto-recovery copying a closed ledger back here) recreates the ledger fenced.

Ids are kept as sorted, disjoint, non-adjacent runs ``[first, last]``: ledgers are
deleted in bulk and mostly in id order, so a bookie that deleted thousands of ledgers
stores a few runs. Pure: :class:`~bookie.storage.entry_storage.EntryStorage` persists
them in the index, in the transaction that drops the ledgers' rows.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable

_RUN = struct.Struct(">qq")


class Tombstones:
    """A set of ledger ids stored as runs; membership is a binary search."""

    __slots__ = ("_firsts", "_lasts")

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []
        self.add_all(ids)

    def __contains__(self, ledger_id: object) -> bool:
        if not isinstance(ledger_id, int):
            return False
        index = bisect.bisect_right(self._firsts, ledger_id) - 1
        return index >= 0 and ledger_id <= self._lasts[index]

    def __len__(self) -> int:
        """How many ids are kept."""
        return sum(last - first + 1 for first, last in zip(self._firsts, self._lasts, strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tombstones):
            return NotImplemented
        return self._firsts == other._firsts and self._lasts == other._lasts

    __hash__ = None  # type: ignore[assignment]  # mutable

    @property
    def runs(self) -> list[tuple[int, int]]:
        """The kept ids as ``(first, last)`` runs, ascending."""
        return list(zip(self._firsts, self._lasts, strict=True))

    def add_all(self, ids: Iterable[int]) -> None:
        """Keep these ids too."""
        for ledger_id in sorted(set(ids)):
            self._add(ledger_id)

    def _add(self, ledger_id: int) -> None:
        firsts, lasts = self._firsts, self._lasts
        index = bisect.bisect_right(firsts, ledger_id) - 1
        if index >= 0 and ledger_id <= lasts[index]:
            return
        joins_left = index >= 0 and lasts[index] == ledger_id - 1
        right = index + 1
        joins_right = right < len(firsts) and firsts[right] == ledger_id + 1
        if joins_left and joins_right:
            lasts[index] = lasts[right]
            del firsts[right], lasts[right]
        elif joins_left:
            lasts[index] = ledger_id
        elif joins_right:
            firsts[right] = ledger_id
        else:
            firsts.insert(right, ledger_id)
            lasts.insert(right, ledger_id)

    def copy(self) -> Tombstones:
        """An independent copy."""
        other = Tombstones()
        other._firsts = list(self._firsts)
        other._lasts = list(self._lasts)
        return other

    def to_bytes(self) -> bytes:
        """The stored form: the runs, 16 bytes each."""
        return b"".join(_RUN.pack(first, last) for first, last in self.runs)

    @classmethod
    def from_bytes(cls, payload: bytes) -> Tombstones | None:
        """The set stored as ``payload``; None if it is not a well-formed stored set."""
        if len(payload) % _RUN.size:
            return None
        tombstones = cls()
        previous = None
        for first, last in _RUN.iter_unpack(payload):
            if last < first or (previous is not None and first <= previous + 1):
                return None
            tombstones._firsts.append(first)
            tombstones._lasts.append(last)
            previous = last
        return tombstones


__all__ = ["Tombstones"]

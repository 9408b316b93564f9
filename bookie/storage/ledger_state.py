"""Per-ledger state a bookie keeps: master key, fence flag, LAC and the sync cursor.

Pure rules, no I/O. The state is made durable by the journal (KEY, FENCE, LAC and ADD
records) and by checkpoints, which store :meth:`LedgerState.to_bytes` in the index.
Every field only moves one way (key set once, fence on for good, LAC and sync cursor only
grow), so applying the same records twice, or a checkpointed state plus the journal
records after it, gives the same result: replay is idempotent.
"""

from __future__ import annotations

import bisect
import dataclasses
import json


class SyncCursor:
    """Which entries of a ledger are synced on this bookie (docs/protocol.md, "LastAddSynced").

    ``last_add_synced`` (LAS): every entry up to it is synced here, or is confirmed in the
    ensemble (a piggybacked LAC). ``ranges``: synced runs above ``LAS + 1``, kept sorted,
    disjoint and non-adjacent, for entries synced out of order.

    Invariant: every range starts above ``LAS + 1``; LAS never decreases.
    """

    __slots__ = ("_ranges", "last_add_synced")

    def __init__(self, last_add_synced: int = -1, ranges: list[list[int]] | None = None) -> None:
        self.last_add_synced = last_add_synced
        self._ranges: list[list[int]] = []
        for first, last in ranges or ():
            self.mark_run(first, last)

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """Synced runs ``(first, last)`` above ``LAS + 1``, ascending."""
        return [(first, last) for first, last in self._ranges]

    def mark_synced(self, entry_id: int) -> None:
        """Record that ``entry_id`` is synced."""
        self.mark_run(entry_id, entry_id)

    def advance_to(self, lac: int) -> None:
        """A piggybacked LAC: if ``lac > LAS`` then ``LAS = lac`` (entries it covers are
        confirmed in the ensemble)."""
        if lac > self.last_add_synced:
            self.last_add_synced = lac
            self._absorb()

    def mark_run(self, first: int, last: int) -> None:
        """Record that every entry in ``first..last`` is synced."""
        if last <= self.last_add_synced:
            return
        if first <= self.last_add_synced + 1 and not self._ranges:
            self.last_add_synced = last  # the common in-order case
            return
        first = max(first, self.last_add_synced + 1)
        # Merge [first, last] into the sorted run list, joining overlapping/adjacent runs.
        index = bisect.bisect_left(self._ranges, [first, first])
        if index > 0 and self._ranges[index - 1][1] >= first - 1:
            index -= 1
            first = min(first, self._ranges[index][0])
        end = index
        while end < len(self._ranges) and self._ranges[end][0] <= last + 1:
            last = max(last, self._ranges[end][1])
            end += 1
        self._ranges[index:end] = [[first, last]]
        self._absorb()

    def _absorb(self) -> None:
        """Fold runs that now touch ``LAS + 1`` into LAS; drop runs below it."""
        while self._ranges and self._ranges[0][0] <= self.last_add_synced + 1:
            _, last = self._ranges.pop(0)
            self.last_add_synced = max(self.last_add_synced, last)

    def to_json(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"las": self.last_add_synced, "ranges": self._ranges}

    def __repr__(self) -> str:
        return f"SyncCursor(last_add_synced={self.last_add_synced}, ranges={self.ranges})"


@dataclasses.dataclass(eq=False)
class LedgerState:
    """What a bookie knows about one ledger.

    Attributes:
        ledger_id: The ledger.
        master_key: Key of the first write or fence; any other key is refused.
        fenced: Once set, plain (non-recovery) adds are refused forever.
        lac: Highest LAC seen, piggybacked on adds or sent explicitly; -1 if none.
        last_entry_id: Highest entry id stored; -1 if none.
        sync: The VOLATILE sync cursor.
    """

    ledger_id: int
    master_key: bytes
    fenced: bool = False
    lac: int = -1
    last_entry_id: int = -1
    sync: SyncCursor = dataclasses.field(default_factory=SyncCursor)

    @property
    def last_add_synced(self) -> int:
        """The sync cursor's LastAddSynced."""
        return self.sync.last_add_synced

    def raise_lac(self, lac: int) -> bool:
        """LAC = max(LAC, lac); True when it grew."""
        if lac > self.lac:
            self.lac = lac
            return True
        return False

    def note_entry(self, entry_id: int) -> None:
        """An entry was stored."""
        if entry_id > self.last_entry_id:
            self.last_entry_id = entry_id

    def to_bytes(self) -> bytes:
        """Serialised form stored in the index at checkpoints."""
        doc = {
            "key": self.master_key.hex(),
            "fenced": self.fenced,
            "lac": self.lac,
            "last_entry_id": self.last_entry_id,
            **self.sync.to_json(),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, ledger_id: int, raw: bytes) -> LedgerState:
        """Inverse of :meth:`to_bytes`; ValueError naming the ledger on a bad record."""
        try:
            doc = json.loads(raw)
            return cls(
                ledger_id=ledger_id,
                master_key=bytes.fromhex(doc["key"]),
                fenced=bool(doc["fenced"]),
                lac=int(doc["lac"]),
                last_entry_id=int(doc["last_entry_id"]),
                sync=SyncCursor(int(doc["las"]), [list(r) for r in doc["ranges"]]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"ledger {ledger_id}: unreadable state record: {exc}") from exc


__all__ = ["LedgerState", "SyncCursor"]

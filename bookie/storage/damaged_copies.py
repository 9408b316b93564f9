"""What a bookie found damaged in its own storage since it started.

Two kinds: a ledger whose index rows are damaged (it is answered IO_ERROR, never "no such
ledger", which recovery counts as proof of absence; forgotten only when the ledger is
deleted), and a stored copy of one entry that a read or an entry listing found damaged (never
served, counted as missing, and replaced by the next add of the same entry, a copy
re-replicated here, instead of being kept as a duplicate).
"""

from __future__ import annotations

from collections.abc import Callable

from walog.wire.status import Status


class DamagedCopies:
    """The damaged ledgers and entry copies of one bookie, and who hears of new ones."""

    def __init__(self) -> None:
        self.ledgers: set[int] = set()
        """Ledgers whose index rows are damaged (found when the store was loaded)."""
        self.entries: dict[int, set[int]] = {}
        """Entry copies found damaged, by ledger."""
        self.listeners: list[Callable[[int, int], None]] = []
        """Called on the loop with ``(ledger id, entry id)`` of each copy found damaged."""

    def of(self, ledger_id: int) -> set[int]:
        """The ledger's entries whose stored copies are damaged (do not change it)."""
        return self.entries.get(ledger_id, set())

    def note(self, ledger_id: int, entry_id: int) -> None:
        """A stored copy was found damaged: remember it, and tell the listeners once."""
        damaged = self.entries.setdefault(ledger_id, set())
        if entry_id in damaged:
            return
        damaged.add(entry_id)
        for listener in self.listeners:
            listener(ledger_id, entry_id)

    def unknown(self, ledger_id: int) -> Status:
        """The answer for a ledger the bookie has no state of: absent, unless its rows are
        damaged."""
        return Status.IO_ERROR if ledger_id in self.ledgers else Status.NO_SUCH_LEDGER

    def forget(self, ledger_id: int) -> None:
        """The ledger was deleted: nothing of it is damaged any more."""
        self.ledgers.discard(ledger_id)
        self.entries.pop(ledger_id, None)


__all__ = ["DamagedCopies"]

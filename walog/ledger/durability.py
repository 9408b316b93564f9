"""The rules of relaxed durability: the LAC, and bookies that restart (docs/protocol.md,
"Relaxed durability").

The durability levels themselves are :class:`walog.wire.durability.Durability`; this is
what a writer of a VOLATILE ledger does with its bookies' LastAddSynced values and
incarnations.
"""

from __future__ import annotations

from collections.abc import Sequence


def lac_from_last_add_synced(
    last_add_synced: Sequence[int], write_quorum: int, ack_quorum: int
) -> int:
    """LAC of a VOLATILE ledger from its ensemble's LastAddSynced values (docs/protocol.md,
    "The LAC of a VOLATILE ledger").

    Sort ascending; LAC = max(sorted[0 .. Qw - Qa]), i.e. the element at index ``Qw - Qa``:
    at least ``Qa`` bookies have synced up to it. Values 4, 7, 9 with Qw = 3:
    Qa = 1 -> 9, Qa = 2 -> 7, Qa = 3 -> 4.
    """
    if len(last_add_synced) < write_quorum:
        raise ValueError(
            f"need a LastAddSynced value from all {write_quorum} bookies, "
            f"got {len(last_add_synced)}"
        )
    ordered = sorted(last_add_synced)
    return ordered[write_quorum - ack_quorum]


class RestartWatch:
    """What a VOLATILE ledger's writer knows of the bookie at one ensemble index: the
    incarnation its answers came from (0: none yet) and the highest entry it acknowledged.

    A bookie acknowledges VOLATILE entries from its page cache, and a restart (a new
    incarnation) loses those it had not synced: the ones above every LastAddSynced it
    reported, before the restart or in the new incarnation's first answer (a clean restart
    syncs everything, and replay syncs what it finds). The writer must not count an answer
    of the new incarnation while such entries may be gone.
    """

    __slots__ = ("acked_top", "incarnation")

    def __init__(self) -> None:
        self.incarnation = 0
        self.acked_top = -1

    def acknowledged(self, top: int) -> None:
        """The bookie acknowledged entries up to ``top`` (in its current incarnation)."""
        if top > self.acked_top:
            self.acked_top = top

    def answer(self, incarnation: int, last_add_synced: int) -> range | None:
        """Note an answer from ``incarnation`` that reports ``last_add_synced`` (the highest
        the bookie ever reported, this answer's included); None when it comes from the known
        incarnation (or from the first, or does not say: 0), else the entries the restart
        may have lost (empty when none). The new incarnation is known from then on."""
        known = self.incarnation
        if incarnation == known or incarnation == 0:
            return None
        self.incarnation = incarnation
        if known == 0:
            return None
        return range(last_add_synced + 1, self.acked_top + 1)


__all__ = ["RestartWatch", "lac_from_last_add_synced"]

"""Durability levels of a ledger and the LAC rule of relaxed durability (seed 004, BP-14).

A ledger's durability is chosen at creation and stored in its metadata for its whole life.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence


class Durability(enum.Enum):
    """When a bookie acknowledges an add.

    PERSISTENT: after the entry is fsynced in the bookie's journal (the default).
    VOLATILE: after the entry reached the bookie's page cache; ``LedgerWriter.force()``
    makes entries durable, and the LAC advances only over entries synced on enough bookies.
    """

    PERSISTENT = "PERSISTENT"
    VOLATILE = "VOLATILE"


def lac_from_last_add_synced(
    last_add_synced: Sequence[int], write_quorum: int, ack_quorum: int
) -> int:
    """LAC of a VOLATILE ledger from its ensemble's LastAddSynced values (seed 004).

    Sort ascending; LAC = max(sorted[0 .. Qw - Qa]), i.e. the element at index ``Qw - Qa``:
    at least ``Qa`` bookies have synced up to it. Seed example, values 1, 2, 3 with Qw = 3:
    Qa = 1 -> 3, Qa = 2 -> 2, Qa = 3 -> 1.
    """
    if len(last_add_synced) < write_quorum:
        raise ValueError(
            f"need a LastAddSynced value from all {write_quorum} bookies, "
            f"got {len(last_add_synced)}"
        )
    ordered = sorted(last_add_synced)
    return ordered[write_quorum - ack_quorum]


__all__ = ["Durability", "lac_from_last_add_synced"]

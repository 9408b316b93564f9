"""Durability levels of a ledger (docs/protocol.md, "Durability levels").

A ledger's durability is chosen at creation and stored in its metadata for its whole life;
every add carries it, so the bookie knows when to acknowledge.
"""

from __future__ import annotations

import enum


class Durability(enum.Enum):
    """When a bookie acknowledges an add.

    PERSISTENT: after the entry is fsynced in the bookie's journal (the default).
    VOLATILE: after the entry reached the bookie's page cache; ``LedgerWriter.force()``
    makes entries durable, and the LAC advances only over entries synced on enough bookies.
    """

    PERSISTENT = "PERSISTENT"
    VOLATILE = "VOLATILE"


__all__ = ["Durability"]

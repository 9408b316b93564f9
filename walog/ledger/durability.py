"""The LAC rule of relaxed durability (seed 004, BP-14).

The durability levels themselves are :class:`walog.wire.durability.Durability`; this is
what a writer of a VOLATILE ledger does with its bookies' LastAddSynced values.
"""

from __future__ import annotations

from collections.abc import Sequence


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


__all__ = ["lac_from_last_add_synced"]

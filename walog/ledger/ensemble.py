"""Ensemble placement, replacement of failed bookies and fragment changes (docs/protocol.md,
"Ensemble changes").

The rules here are pure (no network, clock or disk): what the fragment list looks like after
a change and whether quorums stay possible; which bookies are chosen is the placement
policy's rule (:mod:`walog.ledger.placement`). The I/O helpers (:func:`available_bookies`,
:func:`available_racks`, :func:`placement_candidates`) read the registrations from the
metadata store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence

from walog.ledger.placement import (
    PlacementPolicy,
    RackAwarePlacement,
    not_enough_bookies,
)
from walog.ledger.quorum import write_quorums
from walog.metadata.layout import (
    AVAILABLE_BOOKIES,
    READ_ONLY_BOOKIES,
    bookie_path,
    read_only_bookie_path,
    registered_max_entry_bytes,
    registered_rack,
)
from walog.metadata.store import MetadataStore, NodeNotFoundError

Fragments = tuple[tuple[int, tuple[str, ...]], ...]

Placement = RackAwarePlacement
"""The default placement policy (see :mod:`walog.ledger.placement`)."""


async def available_bookies(store: MetadataStore) -> list[str]:
    """Ids of the bookies currently registered as available, sorted."""
    return sorted(await store.children(AVAILABLE_BOOKIES))


async def available_racks(store: MetadataStore) -> dict[str, str]:
    """The rack of every available bookie, by bookie id (records read concurrently; a
    bookie gone between the listing and its read is left out)."""
    _, racks = await _listed_racks(store)
    return racks


async def read_only_bookies(store: MetadataStore) -> list[str]:
    """Ids of the bookies registered as read-only (alive, serving reads, refusing new
    adds: full disks), sorted. No ensemble picks them; auto-recovery counts them alive."""
    return sorted(await store.children(READ_ONLY_BOOKIES))


async def _listed_racks(
    store: MetadataStore, read_only: bool = False
) -> tuple[list[str], dict[str, str]]:
    ids = await (read_only_bookies if read_only else available_bookies)(store)
    path_of = read_only_bookie_path if read_only else bookie_path

    async def rack_of(bookie: str) -> str | None:
        try:
            raw, _ = await store.get(path_of(bookie))
        except NodeNotFoundError:
            return None
        return registered_rack(raw)

    racks = await asyncio.gather(*(rack_of(b) for b in ids))
    return ids, {b: r for b, r in zip(ids, racks, strict=True) if r is not None}


async def announced_entry_limits(store: MetadataStore) -> dict[str, int]:
    """The largest entry payload each available bookie announces it stores, by bookie id
    (a bookie whose record announces none, or that went away meanwhile, is left out)."""
    ids = await available_bookies(store)

    async def limit_of(bookie: str) -> int | None:
        try:
            raw, _ = await store.get(bookie_path(bookie))
        except NodeNotFoundError:
            return None
        return registered_max_entry_bytes(raw)

    limits = await asyncio.gather(*(limit_of(b) for b in ids))
    return {b: limit for b, limit in zip(ids, limits, strict=True) if limit is not None}


async def read_only_racks(store: MetadataStore) -> dict[str, str]:
    """The rack of every read-only bookie, by bookie id."""
    _, racks = await _listed_racks(store, read_only=True)
    return racks


async def placement_candidates(
    store: MetadataStore, policy: PlacementPolicy
) -> tuple[list[str], dict[str, str] | None]:
    """The available bookies, sorted, and their racks when ``policy`` uses racks (else
    None: the records are not read). The listing decides availability: a bookie gone
    before its record was read stays a candidate, of unknown rack."""
    if not policy.uses_racks:
        return await available_bookies(store), None
    return await _listed_racks(store)


def replace_in_ensemble(
    ensemble: Sequence[str], replacements: Mapping[int, str]
) -> tuple[str, ...]:
    """The ensemble with the bookies at the given indexes replaced."""
    return tuple(replacements.get(i, bookie) for i, bookie in enumerate(ensemble))


def with_new_fragment(
    ensembles: Fragments, first_entry_id: int, ensemble: Sequence[str]
) -> Fragments:
    """The fragment list after an ensemble change starting at ``first_entry_id``.

    Fragments starting at or after ``first_entry_id`` are dropped (they never received a
    confirmed entry), so the list stays strictly increasing by first entry.
    """
    kept = tuple(f for f in ensembles if f[0] < first_entry_id)
    return (*kept, (first_entry_id, tuple(ensemble)))


def quorum_possible(
    ensemble_size: int, write_quorum: int, ack_quorum: int, failed_indexes: Collection[int]
) -> bool:
    """True when every write quorum still has ``ack_quorum`` bookies outside the failed ones,
    so every future entry can still complete."""
    return all(
        sum(1 for i in q if i not in failed_indexes) >= ack_quorum
        for q in write_quorums(ensemble_size, write_quorum)
    )


__all__ = [
    "Fragments",
    "Placement",
    "announced_entry_limits",
    "available_bookies",
    "available_racks",
    "not_enough_bookies",
    "placement_candidates",
    "quorum_possible",
    "read_only_bookies",
    "read_only_racks",
    "replace_in_ensemble",
    "with_new_fragment",
]

"""Ensemble placement, replacement of failed bookies and fragment changes (seed 000).

The rules here are pure (no network, clock or disk): which bookies a new ledger gets, which
bookie replaces a failed one, and what the fragment list looks like after a change. The one
I/O helper, :func:`available_bookies`, reads the registrations from the metadata store.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Collection, Mapping, Sequence

from walog.errors import NotEnoughBookiesError
from walog.ledger.quorum import write_quorums
from walog.metadata.layout import AVAILABLE_BOOKIES, READ_ONLY_BOOKIES
from walog.metadata.store import MetadataStore

Fragments = tuple[tuple[int, tuple[str, ...]], ...]


async def available_bookies(store: MetadataStore) -> list[str]:
    """Ids of the bookies currently registered as available, sorted."""
    return sorted(await store.children(AVAILABLE_BOOKIES))


async def read_only_bookies(store: MetadataStore) -> list[str]:
    """Ids of the bookies registered as read-only (alive, serving reads, refusing new
    adds: full disks), sorted. No ensemble picks them; auto-recovery counts them alive."""
    return sorted(await store.children(READ_ONLY_BOOKIES))


def not_enough_bookies(needed: int, available: Sequence[str], what: str) -> NotEnoughBookiesError:
    """The error for a placement that needs ``needed`` bookies but has only ``available``."""
    listed = ", ".join(sorted(available)) or "none"
    return NotEnoughBookiesError(
        f"{what}={needed} but only {len(available)} bookies are available ({listed})"
    )


class Placement:
    """Chooses bookies for ensembles and replacements, spreading the load.

    Candidates are shuffled (random sample) and the ones this client used least are preferred,
    so the ensembles of many ledgers spread over all bookies. Pass a seeded ``rng`` for
    deterministic choices (simulator).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._usage: collections.Counter[str] = collections.Counter()

    @property
    def usage(self) -> Mapping[str, int]:
        """How many ensemble slots this placement gave each bookie."""
        return self._usage

    def _pick(self, candidates: Collection[str], count: int) -> list[str]:
        shuffled = list(candidates)
        self._rng.shuffle(shuffled)
        # Stable sort: least used first, random order among equals.
        shuffled.sort(key=lambda b: self._usage[b])
        chosen = shuffled[:count]
        self._usage.update(chosen)
        return chosen

    def choose_ensemble(self, available: Sequence[str], ensemble_size: int) -> list[str]:
        """``ensemble_size`` distinct bookies for a new ledger.

        Raises:
            NotEnoughBookiesError: fewer bookies are available than ``ensemble_size``.
        """
        distinct = sorted(set(available))
        if len(distinct) < ensemble_size:
            raise not_enough_bookies(ensemble_size, distinct, "ensemble_size")
        return self._pick(distinct, ensemble_size)

    def choose_replacements(
        self,
        ensemble: Sequence[str],
        failed_indexes: Collection[int],
        available: Sequence[str],
        excluded: Collection[str] = (),
    ) -> dict[int, str]:
        """A replacement per failed ensemble index, for as many as there are candidates.

        A candidate is available, not in the ensemble and not ``excluded`` (bookies that
        failed before). Indexes without a candidate are left out of the result.
        """
        taken = set(ensemble) | set(excluded)
        candidates = [b for b in sorted(set(available)) if b not in taken]
        chosen = self._pick(candidates, len(failed_indexes))
        return dict(zip(sorted(failed_indexes), chosen, strict=False))


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
    "available_bookies",
    "not_enough_bookies",
    "quorum_possible",
    "read_only_bookies",
    "replace_in_ensemble",
    "with_new_fragment",
]

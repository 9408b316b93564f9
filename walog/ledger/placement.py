"""Placement policies: which bookies a new ensemble gets, which bookie replaces a failed one.

Pure rules (no network, clock or disk): the candidates, their racks and the quorum shape go
in, the choice comes out. Writers (ensemble changes), ledger creation and autorecovery all
ask the same policy, so a replacement obeys the rule its ensemble was built by.

Two policies:

- :class:`RackAwarePlacement` (the default) puts each write quorum on ``min(Qw, racks)``
  distinct racks and spreads an ensemble evenly over the racks: no rack holds two of its
  bookies while another rack with a free bookie holds none. When racks are short (fewer
  than Qw, or an ensemble shape no arrangement can satisfy) it places as well as it can
  and logs a warning. On a cluster whose bookies all share one rack it chooses exactly as
  :class:`RandomPlacement` does.
- :class:`RandomPlacement` ignores racks: a random sample, least used bookies first.

Both prefer the bookies this client used least, so the ensembles of many ledgers spread
over all bookies. Pass a seeded ``rng`` for deterministic choices (simulator).
"""

from __future__ import annotations

import collections
import random
from collections.abc import Collection, Mapping, Sequence
from typing import ClassVar

from walog._loggers import get_logger
from walog.errors import NotEnoughBookiesError
from walog.ledger.quorum import write_quorums
from walog.metadata.layout import DEFAULT_RACK

log = get_logger(__name__)

Racks = Mapping[str, str]
"""Bookie id -> rack name. A bookie missing from the mapping has an unknown rack (a lost
bookie no longer registered): it counts for no rack."""


def not_enough_bookies(needed: int, available: Sequence[str], what: str) -> NotEnoughBookiesError:
    """The error for a placement that needs ``needed`` bookies but has only ``available``."""
    listed = ", ".join(sorted(available)) or "none"
    return NotEnoughBookiesError(
        f"{what}={needed} but only {len(available)} bookies are available ({listed})"
    )


class PlacementPolicy:
    """The interface of a placement policy, and the usage bookkeeping both policies share.

    Args:
        rng: source of the random choices (seed it for deterministic placement).
    """

    name: ClassVar[str] = ""
    """The name :func:`placement_policy` knows the policy by."""
    uses_racks: ClassVar[bool] = False
    """True when the policy needs the racks of the candidates (callers then read them)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._usage: collections.Counter[str] = collections.Counter()

    @property
    def usage(self) -> Mapping[str, int]:
        """How many ensemble slots this placement gave each bookie."""
        return self._usage

    def _least_used_first(self, candidates: Collection[str]) -> list[str]:
        shuffled = list(candidates)
        self._rng.shuffle(shuffled)
        # Stable sort: least used first, random order among equals.
        shuffled.sort(key=lambda b: self._usage[b])
        return shuffled

    def _pick(self, candidates: Collection[str], count: int) -> list[str]:
        chosen = self._least_used_first(candidates)[:count]
        self._usage.update(chosen)
        return chosen

    def choose_ensemble(
        self,
        available: Sequence[str],
        ensemble_size: int,
        write_quorum: int | None = None,
        racks: Racks | None = None,
    ) -> list[str]:
        """``ensemble_size`` distinct bookies for a new ledger, in ensemble order.

        Args:
            available: ids of the available bookies.
            ensemble_size: how many to choose.
            write_quorum: the ledger's Qw (default: ``ensemble_size``).
            racks: the rack of each available bookie (default: all in one rack).

        Raises:
            NotEnoughBookiesError: fewer bookies are available than ``ensemble_size``.
        """
        raise NotImplementedError

    def choose_replacements(
        self,
        ensemble: Sequence[str],
        failed_indexes: Collection[int],
        available: Sequence[str],
        excluded: Collection[str] = (),
        *,
        write_quorum: int | None = None,
        racks: Racks | None = None,
    ) -> dict[int, str]:
        """A replacement per failed ensemble index, for as many as there are candidates.

        A candidate is available, not in the ensemble and not ``excluded`` (bookies that
        failed before). Indexes without a candidate are left out of the result.

        Args:
            ensemble: the current ensemble.
            failed_indexes: the indexes to replace.
            available: ids of the available bookies.
            excluded: bookies never to choose.
            write_quorum: the ledger's Qw (default: the ensemble's size).
            racks: racks of the known bookies (default: all in one rack).
        """
        raise NotImplementedError


def _candidates(
    ensemble: Sequence[str], available: Sequence[str], excluded: Collection[str]
) -> list[str]:
    taken = set(ensemble) | set(excluded)
    return [b for b in sorted(set(available)) if b not in taken]


class RandomPlacement(PlacementPolicy):
    """Ignores racks: a random sample of the available bookies, least used first."""

    name = "random"

    def choose_ensemble(
        self,
        available: Sequence[str],
        ensemble_size: int,
        write_quorum: int | None = None,
        racks: Racks | None = None,
    ) -> list[str]:
        """See :meth:`PlacementPolicy.choose_ensemble` (``write_quorum``, ``racks`` unused)."""
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
        *,
        write_quorum: int | None = None,
        racks: Racks | None = None,
    ) -> dict[int, str]:
        """See :meth:`PlacementPolicy.choose_replacements` (racks unused)."""
        chosen = self._pick(_candidates(ensemble, available, excluded), len(failed_indexes))
        return dict(zip(sorted(failed_indexes), chosen, strict=False))


def quorum_shortfall(
    ensemble_racks: Sequence[str | None], write_quorum: int, wanted: int
) -> list[int]:
    """Indexes of the write quorums (by first ensemble index) that span fewer than
    ``wanted`` distinct racks. ``None`` is an unknown rack and counts for none."""
    short = []
    for quorum in write_quorums(len(ensemble_racks), write_quorum):
        spanned = {ensemble_racks[i] for i in quorum} - {None}
        if len(spanned) < wanted:
            short.append(quorum[0])
    return short


def _window_deficit(sequence: Sequence[str], width: int) -> int:
    """How many racks the cyclic windows of ``width`` lack, summed (0: all distinct)."""
    n = len(sequence)
    return sum(width - len({sequence[(i + j) % n] for j in range(width)}) for i in range(n))


def arrange_racks(counts: Mapping[str, int], write_quorum: int, rng: random.Random) -> list[str]:
    """An ensemble-order sequence of racks holding ``counts[r]`` slots of each rack ``r`` in
    which every cyclic window of ``write_quorum`` slots spans as many distinct racks as
    possible (``min(write_quorum, len(counts))`` where any arrangement allows it).

    Greedy (most slots left first, never a rack among the previous ``width - 1``), then
    pairwise swaps while they lower the shortfall; ensembles are small, so this is cheap.
    """
    width = min(write_quorum, len(counts))
    left = dict(counts)
    order = list(left)
    rng.shuffle(order)  # random order among racks with as many slots left
    sequence: list[str] = []
    for _ in range(sum(counts.values())):
        recent = set(sequence[-(width - 1) :]) if width > 1 else set()
        open_racks = [r for r in order if left[r] > 0]
        allowed = [r for r in open_racks if r not in recent] or open_racks
        rack = max(allowed, key=lambda r: left[r])
        left[rack] -= 1
        sequence.append(rack)
    deficit = _window_deficit(sequence, width)
    improved = deficit > 0
    while improved:
        improved = False
        for i in range(len(sequence)):
            for j in range(i + 1, len(sequence)):
                if sequence[i] == sequence[j]:
                    continue
                sequence[i], sequence[j] = sequence[j], sequence[i]
                trial = _window_deficit(sequence, width)
                if trial < deficit:
                    deficit, improved = trial, True
                else:
                    sequence[i], sequence[j] = sequence[j], sequence[i]
    return sequence


class RackAwarePlacement(PlacementPolicy):
    """Each write quorum on ``min(Qw, racks)`` distinct racks; ensembles spread evenly."""

    name = "rack-aware"
    uses_racks = True

    def choose_ensemble(
        self,
        available: Sequence[str],
        ensemble_size: int,
        write_quorum: int | None = None,
        racks: Racks | None = None,
    ) -> list[str]:
        """See :meth:`PlacementPolicy.choose_ensemble`."""
        distinct = sorted(set(available))
        if len(distinct) < ensemble_size:
            raise not_enough_bookies(ensemble_size, distinct, "ensemble_size")
        by_rack: dict[str, list[str]] = collections.defaultdict(list)
        for bookie in distinct:
            by_rack[_rack(racks, bookie)].append(bookie)
        if len(by_rack) <= 1:
            return self._pick(distinct, ensemble_size)
        qw = ensemble_size if write_quorum is None else write_quorum
        queues = {rack: self._least_used_first(members) for rack, members in by_rack.items()}
        counts = self._spread(queues, ensemble_size)
        sequence = arrange_racks(counts, qw, self._rng)
        taken = {rack: iter(queue) for rack, queue in queues.items()}
        ensemble = [next(taken[rack]) for rack in sequence]
        self._usage.update(ensemble)
        wanted = min(qw, len(by_rack))
        short = quorum_shortfall(sequence, qw, wanted)
        if len(by_rack) < qw or short:
            log.warning(
                "racks short: write quorums span fewer racks than wanted",
                write_quorum=qw,
                racks=sorted(by_rack),
                short_quorums=short,
                ensemble=ensemble,
            )
        return ensemble

    def _spread(self, queues: Mapping[str, list[str]], total: int) -> dict[str, int]:
        """Slots per rack: each slot to the rack holding fewest so far among those with a
        free bookie (ties: the rack whose next bookie was used least, then at random)."""
        counts = dict.fromkeys(queues, 0)
        order = list(queues)
        self._rng.shuffle(order)
        for _ in range(total):
            open_racks = [r for r in order if counts[r] < len(queues[r])]
            rack = min(open_racks, key=lambda r: (counts[r], self._usage[queues[r][counts[r]]]))
            counts[rack] += 1
        return {rack: n for rack, n in counts.items() if n}

    def choose_replacements(
        self,
        ensemble: Sequence[str],
        failed_indexes: Collection[int],
        available: Sequence[str],
        excluded: Collection[str] = (),
        *,
        write_quorum: int | None = None,
        racks: Racks | None = None,
    ) -> dict[int, str]:
        """See :meth:`PlacementPolicy.choose_replacements`.

        Each failed index, lowest first, gets the candidate that gives the write quorums
        holding that index the most distinct racks; among those, the one of the rack least
        represented in the ensemble, then the least used, then at random.
        """
        candidates = _candidates(ensemble, available, excluded)
        failed = sorted(failed_indexes)
        known = set(ensemble) - {ensemble[i] for i in failed}
        rack_names = {_rack(racks, b) for b in [*candidates, *known] if _known(racks, b)}
        if racks is None or len(rack_names) <= 1:
            picked = self._pick(candidates, len(failed))
            return dict(zip(failed, picked, strict=False))
        qw = len(ensemble) if write_quorum is None else write_quorum
        quorums = write_quorums(len(ensemble), qw)
        # Racks by ensemble index; failed indexes count for no rack until replaced.
        slots: list[str | None] = [
            None if i in failed or not _known(racks, b) else _rack(racks, b)
            for i, b in enumerate(ensemble)
        ]
        chosen: dict[int, str] = {}
        pool = self._least_used_first(candidates)
        for index in failed:
            if not pool:
                break

            def score(bookie: str, index: int = index) -> tuple[int, int]:
                rack = _rack(racks, bookie)
                spanned = sum(
                    len(({slots[i] for i in q if i != index} - {None}) | {rack})
                    for q in quorums
                    if index in q
                )
                return spanned, -sum(1 for r in slots if r == rack)

            best = max(pool, key=score)  # first of the best: least used, then random
            pool.remove(best)
            chosen[index] = best
            slots[index] = _rack(racks, best)
            self._usage[best] += 1
        wanted = min(qw, len(rack_names))
        short = [
            quorum[0]
            for quorum in quorums
            if any(i in chosen for i in quorum)
            and len({slots[i] for i in quorum} - {None}) < wanted
        ]
        if chosen and (short or len(rack_names) < qw):
            log.warning(
                "racks short: a replacement leaves write quorums on fewer racks than wanted",
                write_quorum=qw,
                racks=sorted(rack_names),
                short_quorums=short,
                replacements=chosen,
            )
        return chosen


def _known(racks: Racks | None, bookie: str) -> bool:
    return racks is None or bookie in racks


def _rack(racks: Racks | None, bookie: str) -> str:
    if racks is None:
        return DEFAULT_RACK
    return racks.get(bookie, DEFAULT_RACK)


POLICIES: Mapping[str, type[PlacementPolicy]] = {
    RackAwarePlacement.name: RackAwarePlacement,
    RandomPlacement.name: RandomPlacement,
}
"""Placement policies by name; the first is the default."""


def placement_policy(
    policy: str | PlacementPolicy | None = None, rng: random.Random | None = None
) -> PlacementPolicy:
    """A placement policy: the one given, a new one by name, or the default (rack-aware).

    Raises:
        ValueError: an unknown policy name (the message lists the known ones).
    """
    if isinstance(policy, PlacementPolicy):
        return policy
    if policy is None:
        return RackAwarePlacement(rng)
    try:
        return POLICIES[policy](rng)
    except KeyError:
        raise ValueError(
            f"unknown placement policy {policy!r}; choose one of {', '.join(POLICIES)}"
        ) from None


__all__ = [
    "DEFAULT_RACK",
    "POLICIES",
    "PlacementPolicy",
    "RackAwarePlacement",
    "Racks",
    "RandomPlacement",
    "arrange_racks",
    "not_enough_bookies",
    "placement_policy",
    "quorum_shortfall",
]

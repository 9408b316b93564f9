"""What auto-recovery repairs: pure rules over ledger metadata (no I/O).

A bookie is *lost* when it appears in some ledger's ensembles but is not registered as
available. A fragment that names a lost bookie has entries with one copy fewer than its
write quorum asks for. The rules (BookKeeper's Auditor and ReplicationWorker make the same
choices):

- every fragment of a CLOSED ledger is repaired;
- of an OPEN ledger, every fragment but the last: its writer owns the last one and replaces
  a failed bookie there itself (on its next write, or when a bookie becomes available); an
  open ledger whose writer is gone is closed by ``walog recover ID`` first;
- a fragment's entries run from its first entry to the next fragment's first minus one
  (all of them were confirmed before the writer moved on), or, for the last fragment of a
  CLOSED ledger, to the ledger's last entry; such a range may be empty;
- the lost bookie at ensemble index ``i`` held exactly the entries whose write set contains
  ``i`` (docs/protocol.md, "Write quorums"); those are copied to the replacement, then the
  fragment's ensemble names the replacement at index ``i`` instead;
- a bookie that is available may still lack entries it should hold (it was down or cut off
  while they were written and the writer had no bookie to replace it with, or stopped
  before it could replace it; a damaged disk): the check asks it once per fragment which
  entries of the fragment it holds (``ListEntries``, answered from its index; BookKeeper's
  replicas check asks the same of ``getListOfEntriesOfLedger``), and every entry of its
  share it lacks is copied back to it, with no metadata change (:func:`entries_missing`);
- a bookie of a version without that call is checked by reads instead: the first and the
  last entry of its share (BookKeeper's LedgerChecker) and a random part of the others
  (BookKeeper's auditorLedgerVerificationPercentage); one it lacks gets its whole share
  copied back;
- in such a check a copy its bookie cannot serve (``IO_ERROR``: a damaged record, a read the
  disk failed, an entry whose absence the bookie cannot prove) counts as missing like one it
  says it lacks: only a new copy mends it, and the bookie takes one in its place. A bookie
  that does not answer holds its copies until the next pass asks again.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Collection, Iterator, Sequence

from walog import mutations
from walog.ledger.quorum import write_set
from walog.metadata.layout import LedgerMetadata
from walog.wire.status import Status


@dataclasses.dataclass(frozen=True)
class Damage:
    """A fragment that names lost bookies."""

    ledger_id: int
    fragment: int
    """Index of the fragment in ``LedgerMetadata.ensembles``."""
    first: int
    """First entry of the fragment."""
    last: int
    """Last entry of the fragment (``first - 1`` when it holds none)."""
    ensemble: tuple[str, ...]
    lost: tuple[int, ...]
    """Ensemble indexes of the lost bookies."""

    def __str__(self) -> str:
        lost = ", ".join(self.ensemble[i] for i in self.lost)
        span = f"entries {self.first}..{self.last}" if self.last >= self.first else "no entries"
        return f"ledger {self.ledger_id} fragment {self.fragment} ({span}) lost {lost}"


def lost_bookies(metadata: LedgerMetadata, available: Collection[str]) -> set[str]:
    """The bookies the ledger's ensembles name that are not available."""
    return {b for _, ensemble in metadata.ensembles for b in ensemble if b not in available}


def damaged_fragments(
    metadata: LedgerMetadata, lost: Collection[str]
) -> tuple[list[Damage], list[Damage]]:
    """``(to repair, left to the writer)``: the fragments naming ``lost`` bookies."""
    repair: list[Damage] = []
    writers: list[Damage] = []
    for damage, writer_owned in _fragments(metadata, lambda bookie: bookie in lost):
        (writers if writer_owned else repair).append(damage)
    return repair, writers


def shares_to_check(metadata: LedgerMetadata, available: Collection[str]) -> list[Damage]:
    """The fragments auto-recovery may repair, each with the ``available`` bookies of its
    ensemble (as ``lost``: the indexes whose share is checked) when it holds entries."""
    return [
        damage
        for damage, writer_owned in _fragments(metadata, lambda bookie: bookie in available)
        if not writer_owned and damage.last >= damage.first
    ]


def _fragments(
    metadata: LedgerMetadata, chosen: Callable[[str], bool]
) -> Iterator[tuple[Damage, bool]]:
    """Each fragment naming a ``chosen`` bookie as a :class:`Damage` of those indexes, and
    whether its writer owns it (the last fragment of an OPEN ledger)."""
    fragments = metadata.ensembles
    for number, (first, ensemble) in enumerate(fragments):
        indexes = tuple(i for i, bookie in enumerate(ensemble) if chosen(bookie))
        if not indexes:
            continue
        is_last = number == len(fragments) - 1
        if is_last:
            last = metadata.last_entry_id if metadata.is_closed else -1
        else:
            last = fragments[number + 1][0] - 1
        damage = Damage(metadata.ledger_id, number, first, max(last, first - 1), ensemble, indexes)
        yield damage, is_last and not metadata.is_closed


def entries_held(
    damage: Damage, index: int, ensemble_size: int, write_quorum: int
) -> Iterator[int]:
    """The entries of the fragment that the bookie at ``index`` holds (its write sets)."""
    for entry_id in range(damage.first, damage.last + 1):
        if index in write_set(entry_id, ensemble_size, write_quorum):
            yield entry_id


def still_damaged(metadata: LedgerMetadata, damage: Damage, index: int) -> bool:
    """True while the fragment (same first entry) still names the lost bookie at ``index``
    (after a re-read: a writer or another auto-recovery may have changed the metadata)."""
    if damage.fragment >= len(metadata.ensembles):
        return False
    first, ensemble = metadata.ensembles[damage.fragment]
    return first == damage.first and ensemble[index] == damage.ensemble[index]


def with_replacement(
    metadata: LedgerMetadata, damage: Damage, replacements: dict[int, str]
) -> LedgerMetadata:
    """The metadata with the fragment's lost bookies replaced (other fragments unchanged)."""
    fragments = list(metadata.ensembles)
    first, ensemble = fragments[damage.fragment]
    fragments[damage.fragment] = (
        first,
        tuple(replacements.get(i, bookie) for i, bookie in enumerate(ensemble)),
    )
    return metadata.with_changes(ensembles=tuple(fragments))


def copy_missing(status: Status) -> bool:
    """Whether a bookie's answer to a check of an entry of its share shows its copy missing:
    it has no such entry or ledger, or it cannot serve the copy (``IO_ERROR``)."""
    if status is Status.IO_ERROR:
        return not mutations.enabled("verify_counts_unreadable_as_held")
    return status in (Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER)


def entries_missing(
    share: Sequence[int], status: Status, held: Sequence[tuple[int, int]]
) -> list[int]:
    """The entries of ``share`` (a bookie's share of a fragment, ascending) that its answer
    to an entry list shows missing: with OK those outside every range of ``held``
    (``(first, last)`` ranges, ascending and apart), else all of them when the status says
    copies are missing (:func:`copy_missing`: no such ledger, an index it cannot read) and
    none otherwise (an answer that tells nothing, such as BAD_REQUEST)."""
    if status is not Status.OK:
        return list(share) if copy_missing(status) else []
    missing: list[int] = []
    ranges = iter(held)
    current = next(ranges, None)
    for entry_id in share:
        while current is not None and current[1] < entry_id:
            current = next(ranges, None)
        if current is None or entry_id < current[0]:
            missing.append(entry_id)
    return missing


def entries_to_verify(share: Sequence[int], percent: float, rng: random.Random) -> list[int]:
    """The entries of one bookie's share that a check reads, in order: the first and the
    last, and ``percent`` % (0-100, rounded up) of the others, picked with ``rng``."""
    if not share:
        return []
    middle = share[1:-1]
    picked = rng.sample(middle, math.ceil(len(middle) * percent / 100))
    return sorted({share[0], share[-1], *picked})


__all__ = [
    "Damage",
    "copy_missing",
    "damaged_fragments",
    "entries_held",
    "entries_missing",
    "entries_to_verify",
    "lost_bookies",
    "shares_to_check",
    "still_damaged",
    "with_replacement",
]

"""What one auto-recovery pass found and did (:class:`Report`), for the operator, the
metrics and the callers of :func:`walog.autorecovery.recover`."""

from __future__ import annotations

import dataclasses

from walog.autorecovery.rules import Damage


@dataclasses.dataclass
class Report:
    """What one pass found and did."""

    missing: set[str] = dataclasses.field(default_factory=set)
    """Bookies named by some ensemble but not available (lost or not, by the caller's rule)."""
    under_replicated: set[int] = dataclasses.field(default_factory=set)
    """Ledgers whose ensembles named an unavailable bookie when the pass looked at them
    (repaired by this pass or not)."""
    repaired: list[tuple[Damage, dict[int, str]]] = dataclasses.field(default_factory=list)
    """Fragments repaired, with the replacement per ensemble index."""
    left_to_writers: list[Damage] = dataclasses.field(default_factory=list)
    """Last fragments of OPEN ledgers that name lost bookies."""
    refilled: list[Damage] = dataclasses.field(default_factory=list)
    """Fragments where an available bookie (``lost`` names its index) lacked entries of its
    share; the share was copied back to it (with ``verify``)."""
    unrepairable: list[tuple[Damage | int, str]] = dataclasses.field(default_factory=list)
    """Fragments (or whole ledgers, by id) that could not be repaired, and why."""
    locked: list[int] = dataclasses.field(default_factory=list)
    """Ledgers left unrepaired because another repairer (an auto-recovery worker) held
    their repair lock (only with ``recover(lock_as=...)``)."""
    audit: bool = False
    """True for the auditor's pass over every ledger (``missing`` and ``under_replicated``
    then describe the whole cluster); False for a repair or check of some ledgers."""

    def as_json(self) -> dict[str, object]:
        """The report as plain JSON values."""

        def fragment(damage: Damage) -> dict[str, object]:
            return {
                "ledger_id": damage.ledger_id,
                "fragment": damage.fragment,
                "first_entry_id": damage.first,
                "last_entry_id": damage.last,
                "lost": [damage.ensemble[i] for i in damage.lost],
            }

        return {
            "missing_bookies": sorted(self.missing),
            "repaired": [
                {**fragment(d), "replacements": {d.ensemble[i]: b for i, b in r.items()}}
                for d, r in self.repaired
            ],
            "left_to_writers": [fragment(d) for d in self.left_to_writers],
            "refilled": [
                {**fragment(d), "lost": [], "bookie": d.ensemble[d.lost[0]]} for d in self.refilled
            ],
            "unrepairable": [
                {**(fragment(d) if isinstance(d, Damage) else {"ledger_id": d}), "reason": why}
                for d, why in self.unrepairable
            ],
            "locked": sorted(self.locked),
        }


__all__ = ["Report"]

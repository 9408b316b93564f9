"""The entry type readers hand to users."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One ledger entry: ``ledger_id``, ``entry_id`` and its ``data``."""

    ledger_id: int
    entry_id: int
    data: bytes


__all__ = ["Entry"]

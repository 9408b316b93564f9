"""How every reader of a walog format treats the version number it finds (pure).

Each format on disk and on the wire carries a version (docs/compatibility.md lists them).
A reader reads every version from 1 up to the newest it knows; a newer one stops it with
one error that names both versions and the fix, never a guess at what the new fields
mean. :func:`check_version` is that rule, shared by every reader; each raises the error
type of its own boundary.
"""

from __future__ import annotations

from collections.abc import Callable


def newer_version_message(what: str, found: int, known: int, upgrade: str = "walog") -> str:
    """The one message for a newer version: ``ledger 7's metadata has format version 3;
    this walog reads up to 2: upgrade walog``.

    Args:
        what: the thing read, as a user names it (``ledger 7's metadata``).
        found: the version it carries.
        known: the newest version this walog reads.
        upgrade: what to upgrade (``walog``, ``the bookie``...).
    """
    return f"{what} has format version {found}; this walog reads up to {known}: upgrade {upgrade}"


def check_version(
    what: str,
    found: object,
    known: int,
    error: Callable[[str], Exception],
    *,
    newer: Callable[[str], Exception] | None = None,
    upgrade: str = "walog",
) -> int:
    """``found`` when this walog reads that version of ``what`` (1 to ``known``).

    Args:
        what: the thing read, as a user names it.
        found: the version it carries.
        known: the newest version this walog reads.
        error: builds the exception raised (the reader's own type).
        newer: builds the exception for a newer version (default: ``error``).
        upgrade: what to upgrade when ``found`` is newer.

    Raises:
        Exception: ``newer(message)`` for a newer version (the message names both);
            ``error(message)`` for a version no walog writes (not a positive integer:
            damage).
    """
    if isinstance(found, bool) or not isinstance(found, int) or found < 1:
        raise error(f"{what} has format version {found!r}, which no walog writes (damaged?)")
    if found > known:
        raise (newer or error)(newer_version_message(what, found, known, upgrade))
    return found


__all__ = ["check_version", "newer_version_message"]

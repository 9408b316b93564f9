"""Auto-recovery's I/O: find the damaged fragments, copy their entries, swap the bookie in.

:func:`recover` is one audit-and-repair pass over every ledger (``walog autorecovery --once``
runs one; the daemon runs one per interval). Per damaged fragment (see
:mod:`walog.autorecovery.rules`): a replacement is chosen among the available bookies outside
the fragment's ensemble; every entry the lost bookie held is read from the surviving bookies
of its write set (digests verified) and written to the replacement as a *recovery* add (so a
fenced or closed ledger accepts it) with the ledger's master key, PERSISTENT; only once the
replacement acknowledged all of them does a compare-and-set put it into the fragment's
ensemble. A lost CAS re-reads the metadata: if the fragment still names the lost bookie the
swap is applied to the new version, else (a writer or another auto-recovery got there
first) nothing more is done. Adds are idempotent on a bookie, so a pass that dies half way
is simply run again; copies made for a swap that never happened are deleted by their bookie
(its stray-copy scan, :mod:`bookie.gc`).

A bookie being retired (decommissioned) counts as lost but still serves: its copies are
read too, after the other bookies', and it is never chosen as a replacement. A repairer
other than an auto-recovery worker (``walog bookie decommission``) passes ``lock_as``: it
then repairs each ledger only under the lock the workers take,
``/underreplication/locks/<id>``, and from its metadata as read under it, so that two
repairers never pick one replacement for two bookies of a fragment; a ledger whose lock is
held is left for a later pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Collection, Sequence

from walog.autorecovery.report import Report
from walog.autorecovery.rules import (
    Damage,
    copy_missing,
    damaged_fragments,
    entries_held,
    entries_missing,
    entries_to_verify,
    lost_bookies,
    shares_to_check,
    still_damaged,
    with_replacement,
)
from walog.errors import (
    BookieCallUnsupportedError,
    BookieError,
    MetadataConflictError,
    NoSuchLedgerError,
    UnauthorizedError,
    WalogError,
)
from walog.ledger.context import LedgerContext
from walog.ledger.create import verify_password
from walog.ledger.ensemble import placement_candidates, read_only_bookies
from walog.ledger.placement import PlacementPolicy, Racks, placement_policy
from walog.ledger.quorum import write_set
from walog.ledger.readops import read_entry
from walog.metadata.layout import LEDGERS, LedgerMetadata, repair_lock_path
from walog.metadata.store import NodeExistsError
from walog.wire.digest import entry_digest
from walog.wire.status import Status

COPY_BATCH = 256
"""Entries read and written at once while copying a fragment."""


class Unrepairable(WalogError):
    """A fragment that cannot be repaired now (no password, no bookie, no surviving copy)."""


def master_key_for(metadata: LedgerMetadata, passwords: Sequence[bytes]) -> bytes | None:
    """The ledger's master key from the first of ``passwords`` that matches, else None."""
    for password in passwords:
        try:
            return verify_password(metadata, password)
        except UnauthorizedError:
            continue
    return None


async def recover(
    ctx: LedgerContext,
    *,
    passwords: Sequence[bytes] = (b"",),
    is_lost: Callable[[str], bool] | None = None,
    placement: PlacementPolicy | None = None,
    verify: bool = False,
    verify_percent: float = 0.0,
    retiring: Collection[str] = (),
    ledgers: Collection[int] | None = None,
    lock_as: str | None = None,
) -> Report:
    """One pass over every ledger: repair the fragments that name lost bookies.

    Args:
        ctx: metadata store, bookie pool and settings.
        passwords: candidate ledger passwords (checked against each ledger's metadata).
        is_lost: which missing bookies count as lost (default: every missing one).
        placement: chooses replacements (default: a fresh rack-aware one).
        verify: also check that every available bookie holds every entry of its share of
            each fragment (one ``ListEntries`` call per fragment and bookie, answered from
            its index), and copy back to it each entry it lacks.
        verify_percent: with ``verify``, for a bookie without ``ListEntries`` (an older
            version), which is checked by reading the first and the last entry of its
            share instead: also read this share (0-100 %) of the other entries, picked at
            random each pass.
        retiring: bookies to move every fragment off although they still serve (being
            decommissioned): counted as lost, never chosen as replacements, but read from
            (after the other bookies) for the copies they hold.
        ledgers: only these ledgers (None: every ledger).
        lock_as: repair each ledger only under the auto-recovery workers' lock of it,
            registered under this name (None: the caller is a worker holding it already,
            or runs alone); a ledger whose lock is held is skipped (``Report.locked``).

    Raises:
        ValueError: ``verify_percent`` is outside 0-100.
    """
    if not 0 <= verify_percent <= 100:
        raise ValueError(f"verify_percent must be 0-100, got {verify_percent}")
    placement = placement_policy(placement)
    listed, racks = await placement_candidates(ctx.store, placement)
    available = [b for b in listed if b not in retiring]
    # Read-only bookies (full disks) hold their entries and serve them: not lost, but no
    # replacement is placed on them.
    alive = (set(available) | set(await read_only_bookies(ctx.store))) - set(retiring)
    report = Report()
    names = await ctx.store.children(LEDGERS)
    for ledger_id in sorted(int(name) for name in names if name.isdigit()):
        if ledgers is not None and ledger_id not in ledgers:
            continue
        try:
            metadata, _ = await ctx.read_metadata(ledger_id)
        except NoSuchLedgerError:
            continue  # deleted meanwhile
        missing = lost_bookies(metadata, alive)
        report.missing |= missing
        if missing:
            report.under_replicated.add(ledger_id)
        lost = {b for b in missing if is_lost is None or is_lost(b)}
        repair, writers = damaged_fragments(metadata, lost)
        report.left_to_writers += writers
        if not repair and not verify:
            continue
        key = master_key_for(metadata, passwords)
        if key is None and repair:
            report.unrepairable.append((ledger_id, _NO_PASSWORD))
            continue
        if key is not None and repair:
            fixer = _Fixer(ctx, key, available, placement, racks, retiring, report)
            if lock_as is None:
                await fixer.repair(metadata, repair)
            else:
                await fixer.repair_locked(ledger_id, lock_as, alive, is_lost)
        if verify:
            try:
                await refill_shares(ctx, ledger_id, key, available, report, verify_percent)
            except NoSuchLedgerError:
                continue  # deleted meanwhile
    return report


_NO_PASSWORD = "no given password matches the ledger's (pass --password)"


@dataclasses.dataclass
class _Fixer:
    """Repairs the damaged fragments of one ledger for :func:`recover`."""

    ctx: LedgerContext
    key: bytes
    available: Sequence[str]
    placement: PlacementPolicy
    racks: Racks | None
    retiring: Collection[str]
    report: Report

    async def repair(self, metadata: LedgerMetadata, repair: Sequence[Damage]) -> None:
        """Repair each of ``repair`` (fragments of ``metadata``), reporting each outcome."""
        for damage in repair:
            try:
                replacements = await repair_fragment(
                    self.ctx,
                    metadata,
                    damage,
                    self.key,
                    self.available,
                    self.placement,
                    self.racks,
                    retiring=self.retiring,
                )
            except NoSuchLedgerError:
                return  # deleted meanwhile: nothing left to repair
            except WalogError as exc:
                self.report.unrepairable.append((damage, str(exc)))
                continue
            if replacements:
                self.report.repaired.append((damage, replacements))

    async def repair_locked(
        self,
        ledger_id: int,
        owner: str,
        alive: Collection[str],
        is_lost: Callable[[str], bool] | None,
    ) -> None:
        """Repair the ledger under the auto-recovery workers' lock of it, from its metadata
        as read under the lock; skip it (``Report.locked``) while another holds the lock."""
        lock = repair_lock_path(ledger_id)
        try:
            await self.ctx.store.register(lock, owner.encode())
        except NodeExistsError:
            self.report.locked.append(ledger_id)
            return
        try:
            try:
                metadata, _ = await self.ctx.read_metadata(ledger_id)
            except NoSuchLedgerError:
                return  # deleted meanwhile
            missing = lost_bookies(metadata, alive)
            lost = {b for b in missing if is_lost is None or is_lost(b)}
            await self.repair(metadata, damaged_fragments(metadata, lost)[0])
        finally:
            await self.ctx.store.unregister(lock)


async def refill_shares(
    ctx: LedgerContext,
    ledger_id: int,
    master_key: bytes | None,
    available: Sequence[str],
    report: Report,
    percent: float = 0.0,
) -> None:
    """Copy back to each available bookie of each fragment the entries of its share it
    lacks (see :func:`~walog.autorecovery.rules.shares_to_check`): each bookie is asked once
    per fragment which entries of it it holds
    (:func:`~walog.autorecovery.rules.entries_missing`). A bookie without that call is
    checked by reads of the first and the last entry of its share and ``percent`` % of the
    others picked at random (:func:`~walog.autorecovery.rules.entries_to_verify`), and
    gets its whole share back when one is missing. The ledger's master key (None: no
    password given matched) is needed only to copy."""
    metadata, _ = await ctx.read_metadata(ledger_id)  # after any repair of this pass
    e, qw = metadata.ensemble_size, metadata.write_quorum
    rng = random.Random()
    for fragment in shares_to_check(metadata, available):
        for index in fragment.lost:
            bookie = fragment.ensemble[index]
            share = list(entries_held(fragment, index, e, qw))
            missing = await _missing(ctx, fragment, share, bookie, percent, rng)
            if not missing:
                continue
            damage = dataclasses.replace(fragment, lost=(index,))
            if master_key is None:
                report.unrepairable.append((damage, _NO_PASSWORD))
                continue
            try:
                await copy_entries(
                    ctx, metadata, damage, index, bookie, master_key, entries=missing
                )
            except WalogError as exc:
                report.unrepairable.append((damage, str(exc)))
                continue
            report.refilled.append(damage)


async def _missing(
    ctx: LedgerContext,
    fragment: Damage,
    share: Sequence[int],
    bookie: str,
    percent: float,
    rng: random.Random,
) -> list[int]:
    """The entries of ``share`` (of ``fragment``) that ``bookie`` lacks, by its entry list;
    by reads when it does not know the call (then all of ``share`` when one read finds an
    entry missing). No answer: none, the next pass asks again."""
    client = ctx.pool.get(bookie)
    try:
        reply = await client.list_entries(fragment.ledger_id, fragment.first, fragment.last)
    except BookieCallUnsupportedError:
        checked = entries_to_verify(share, percent, rng)
        return [] if await _holds_all(ctx, fragment.ledger_id, checked, bookie) else list(share)
    except BookieError:
        return []
    return entries_missing(share, reply.status, reply.ranges)


async def _holds_all(
    ctx: LedgerContext, ledger_id: int, entry_ids: Sequence[int], bookie: str
) -> bool:
    """Whether ``bookie`` holds each of ``entry_ids``, asked one at a time up to the first
    it lacks."""
    for entry_id in entry_ids:
        if not await _holds(ctx, ledger_id, entry_id, bookie):
            return False
    return True


async def _holds(ctx: LedgerContext, ledger_id: int, entry_id: int, bookie: str) -> bool:
    """False only when ``bookie`` answers that it lacks the entry or cannot serve its copy
    (:func:`~walog.autorecovery.rules.copy_missing`); no answer: True, the next pass asks
    again."""
    try:
        reply = await ctx.pool.get(bookie).read(ledger_id, entry_id, entry_id)
    except BookieError:
        return True
    return not copy_missing(reply.status)


async def repair_fragment(
    ctx: LedgerContext,
    metadata: LedgerMetadata,
    damage: Damage,
    master_key: bytes,
    available: Sequence[str],
    placement: PlacementPolicy,
    racks: Racks | None = None,
    *,
    retiring: Collection[str] = (),
) -> dict[int, str]:
    """Copy the lost bookies' entries of one fragment to replacements and swap them in;
    the replacements, or {} when someone else repaired the fragment first. Lost bookies
    in ``retiring`` still serve: their copies are read too.

    Raises:
        Unrepairable: too few available bookies, or an entry without a surviving copy, or a
            replacement that refused a copy.
        NoSuchLedgerError: the ledger was deleted.
    """
    replacements = placement.choose_replacements(
        damage.ensemble,
        damage.lost,
        available,
        write_quorum=metadata.write_quorum,
        racks=racks,
    )
    if len(replacements) < len(damage.lost):
        raise Unrepairable(
            f"{damage}: {len(damage.lost)} replacements needed, "
            f"{len(replacements)} available bookies outside the ensemble"
        )
    for index, target in replacements.items():
        await copy_entries(ctx, metadata, damage, index, target, master_key, retiring=retiring)
    while True:
        current, version = await ctx.read_metadata(damage.ledger_id)
        if not all(still_damaged(current, damage, i) for i in replacements):
            return {}
        try:
            await ctx.write_metadata(with_replacement(current, damage, replacements), version)
        except MetadataConflictError:
            continue
        return replacements


async def copy_entries(
    ctx: LedgerContext,
    metadata: LedgerMetadata,
    damage: Damage,
    index: int,
    target: str,
    master_key: bytes,
    *,
    retiring: Collection[str] = (),
    entries: Sequence[int] | None = None,
) -> int:
    """Copy the entries the bookie at ``index`` held (or only ``entries`` of them) to
    ``target``; how many were copied.

    Each entry is read from the bookies of its write set that are not lost, then from the
    lost ones that are only being retired (``retiring``: they still serve their copies,
    which may be the only ones left)."""
    e, qw = metadata.ensemble_size, metadata.write_quorum
    lost = set(damage.lost)
    serving = [i for i in lost if damage.ensemble[i] in retiring]

    def survivors(entry_id: int) -> list[str]:
        indexes = write_set(entry_id, e, qw)
        order = [i for i in indexes if i not in lost] + [i for i in indexes if i in serving]
        return [damage.ensemble[i] for i in order]

    client = ctx.pool.get(target)
    todo = list(entries_held(damage, index, e, qw) if entries is None else entries)
    for start in range(0, len(todo), COPY_BATCH):
        batch = todo[start : start + COPY_BATCH]
        try:
            stored = await asyncio.gather(
                *(
                    read_entry(ctx, damage.ledger_id, entry_id, survivors(entry_id))
                    for entry_id in batch
                )
            )
        except WalogError as exc:
            raise Unrepairable(
                f"{damage}: an entry cannot be read from its survivors: {exc}"
            ) from exc
        adds = [
            client.add(
                damage.ledger_id,
                s.entry_id,
                s.lac,
                s.data,
                entry_digest(damage.ledger_id, s.entry_id, s.lac, s.data),
                master_key,
                recovery=True,
            )
            for s in stored
        ]
        replies = await asyncio.gather(*adds)
        refused = [
            (s.entry_id, r.status)
            for s, r in zip(stored, replies, strict=True)
            if r.status is not Status.OK
        ]
        if refused:
            entry_id, status = refused[0]
            raise Unrepairable(f"{damage}: bookie {target} refused entry {entry_id}: {status.name}")
    return len(todo)


__all__ = [
    "COPY_BATCH",
    "Unrepairable",
    "copy_entries",
    "master_key_for",
    "recover",
    "refill_shares",
    "repair_fragment",
]

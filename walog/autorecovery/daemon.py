"""Several ``walog autorecovery`` daemons: one elected auditor, every daemon a worker.

As in BookKeeper (its Auditor and ReplicationWorkers):

- **Auditor.** The daemons campaign in the election ``autorecovery-auditor`` of the metadata
  store (walog/metadata/election.py); the winner audits every ``interval`` seconds: it reads
  every ledger's metadata, keeps the clock of how long each bookie has been unavailable,
  and for each ledger with a fragment to repair (a bookie unavailable for ``lost_after``
  seconds) publishes the persistent record ``/underreplication/ledgers/<id>`` naming the
  lost bookies. A daemon that loses the term (its session expired, it stopped) stops
  auditing; another wins and starts its clocks afresh (so a bookie counts as lost a little
  later, never sooner).
- **Workers.** Every daemon takes published ledgers one at a time under a liveness-bound
  lock, ``/underreplication/locks/<id>`` (an ephemeral ZooKeeper node, an SQLite row with
  heartbeats): whoever creates it owns the ledger's repair. It repairs the fragments that
  name the published bookies (walog/autorecovery/replicate.py), removes the record once
  nothing is left to repair, and releases the lock. A daemon that dies loses its locks with
  its session, and another takes the ledger over. The repair itself is safe to repeat: its
  metadata swap is a compare-and-set.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable

from walog._loggers import get_logger
from walog._tasks import cancel_and_wait
from walog.autorecovery.replicate import copy_entries, master_key_for, recover
from walog.autorecovery.report import Report
from walog.autorecovery.rules import damaged_fragments, lost_bookies, shares_to_check
from walog.errors import NoSuchLedgerError, WalogError
from walog.ledger.context import LedgerContext
from walog.ledger.ensemble import available_bookies, read_only_bookies
from walog.ledger.placement import PlacementPolicy, placement_policy
from walog.metadata.election import elect
from walog.metadata.layout import (
    LEDGERS,
    UNDER_REPLICATED,
    repair_doc,
    repair_lock_path,
    repair_record,
    under_replicated_path,
)
from walog.metadata.store import NodeExistsError, NodeNotFoundError

_log = get_logger("walog.autorecovery")

AUDITOR_ELECTION = "autorecovery-auditor"


async def audit(
    ctx: LedgerContext, is_lost: Callable[[str], bool], needing: set[int] | None = None
) -> tuple[list[int], set[str]]:
    """Publish every ledger with a fragment to repair; returns ``(published, missing)``:
    the ledgers published by this pass and the bookies named but not alive. ``needing``,
    when given, receives every ledger that names a missing bookie (published now, earlier,
    or not yet lost long enough to be)."""
    alive = set(await available_bookies(ctx.store)) | set(await read_only_bookies(ctx.store))
    published: list[int] = []
    missing_all: set[str] = set()
    for name in await ctx.store.children(LEDGERS):
        if not name.isdigit():
            continue
        try:
            metadata, _ = await ctx.read_metadata(int(name))
        except NoSuchLedgerError:
            continue
        missing = lost_bookies(metadata, alive)
        missing_all |= missing
        if missing and needing is not None:
            needing.add(metadata.ledger_id)
        lost = {b for b in missing if is_lost(b)}
        repair, _ = damaged_fragments(metadata, lost)
        if not repair:
            continue
        record = repair_record(lost=sorted(lost))
        with contextlib.suppress(NodeExistsError):
            await ctx.store.create(under_replicated_path(metadata.ledger_id), record)
            published.append(metadata.ledger_id)
    return published, missing_all


def _missing_long(since: dict[str, float], now: float, lost_after: float, bookie: str) -> bool:
    """A bookie is lost once it was already missing ``lost_after`` seconds ago."""
    return now - since.get(bookie, now) >= lost_after


class Daemon:
    """One ``walog autorecovery`` daemon: a candidate auditor and a worker.

    Args:
        ctx: metadata store, bookie pool and settings.
        daemon_id: this daemon's name in the election and in its locks.
        passwords: candidate ledger passwords.
        interval_s: seconds between audits, and between looks at the published ledgers.
        lost_after_s: seconds a bookie must stay unavailable before it counts as lost.
        on_report: called with each pass's report and how many seconds it took: each audit
            (printing).
        verify_percent: when not None, the auditor also checks after each audit that the
            available bookies hold their shares (``recover(verify=True)``); a bookie that
            cannot list its entries is checked by reads, of this percentage of the other
            entries too.
        placement: chooses replacements (default: the rack-aware policy writers use).
    """

    def __init__(
        self,
        ctx: LedgerContext,
        daemon_id: str,
        passwords: list[bytes],
        interval_s: float,
        lost_after_s: float,
        on_report: Callable[[Report, float], None] = lambda report, seconds: None,
        verify_percent: float | None = None,
        placement: PlacementPolicy | None = None,
    ) -> None:
        self._ctx = ctx
        self.daemon_id = daemon_id
        self._passwords = passwords
        self._interval_s = interval_s
        self._lost_after_s = lost_after_s
        self._on_report = on_report
        self._verify_percent = verify_percent
        self._placement = placement_policy(placement)
        self.leading = False
        """True while this daemon is the auditor."""
        self.repaired_ledgers: list[int] = []
        """Ledgers this daemon's worker repaired."""
        self._unreadable: set[int] = set()  # ledgers whose repair record it could not read

    async def run(self, stop: asyncio.Event) -> None:
        """Audit while elected and work, until ``stop`` is set."""
        tasks = [asyncio.create_task(self._campaign()), asyncio.create_task(self._work(stop))]
        try:
            await stop.wait()
        finally:
            await cancel_and_wait(*tasks)

    async def _campaign(self) -> None:
        store = self._ctx.store
        while True:
            term = await elect(store, AUDITOR_ELECTION, self.daemon_id)
            self.leading = True
            _log.info("elected auditor", daemon=self.daemon_id, epoch=term.epoch)
            auditing = asyncio.create_task(self._audit_while_leading())
            try:
                await term.wait_lost()
            finally:
                self.leading = False
                await cancel_and_wait(auditing)
                if not term.lost.is_set():
                    await term.resign()  # cancelled: let another daemon audit at once

    async def _audit_while_leading(self) -> None:
        missing_since: dict[str, float] = {}
        while True:
            now = time.monotonic()
            since = dict(missing_since)
            is_lost = functools.partial(_missing_long, since, now, self._lost_after_s)
            needing: set[int] = set()
            try:
                published, missing = await audit(self._ctx, is_lost, needing)
            except WalogError as exc:
                _log.warning("audit failed", error=str(exc))
            else:
                # Bookies back in service start their clock over when they go missing again.
                missing_since = {b: missing_since.get(b, now) for b in missing}
                if published:
                    _log.info("ledgers published for repair", ledgers=published)
                # The audit pass, for the operator and the metrics.
                seconds = time.monotonic() - now
                audited = Report(missing=missing, under_replicated=needing, audit=True)
                self._on_report(audited, seconds)
            if self._verify_percent is not None:
                started = time.monotonic()
                try:
                    report = await recover(
                        self._ctx,
                        passwords=self._passwords,
                        is_lost=lambda bookie: False,  # lost bookies are the workers' part
                        verify=True,
                        verify_percent=self._verify_percent,
                        placement=self._placement,
                    )
                except WalogError as exc:
                    _log.warning("share verification failed", error=str(exc))
                else:
                    self._on_report(report, time.monotonic() - started)
            await asyncio.sleep(self._interval_s)

    async def _work(self, stop: asyncio.Event) -> None:
        store = self._ctx.store
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def on_change() -> None:  # any thread
            loop.call_soon_threadsafe(changed.set)

        cancel = store.watch(UNDER_REPLICATED, on_change)
        try:
            while not stop.is_set():
                changed.clear()
                try:
                    for name in await store.children(UNDER_REPLICATED):
                        if name.isdigit() and not stop.is_set():
                            await self._take(int(name))
                except WalogError as exc:
                    _log.warning("replication work failed", error=str(exc))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval_s):
                        await changed.wait()
        finally:
            cancel()

    async def _replace_damaged(self, ledger_id: int, bookies: set[str], report: Report) -> None:
        """Copy the shares of ``bookies`` (which found a damaged copy of an entry of the
        ledger) back to them from the other bookies: a bookie takes a copy of an entry it
        found damaged in place of the damaged one, and keeps the others it holds."""
        try:
            metadata, _ = await self._ctx.read_metadata(ledger_id)
        except NoSuchLedgerError:
            return
        key = master_key_for(metadata, self._passwords)
        for share in shares_to_check(metadata, bookies):
            if key is None:
                report.unrepairable.append((share, "no given password matches the ledger's"))
                continue
            for index in share.lost:
                damage = dataclasses.replace(share, lost=(index,))
                try:
                    await copy_entries(
                        self._ctx, metadata, damage, index, share.ensemble[index], key
                    )
                except WalogError as exc:
                    report.unrepairable.append((damage, str(exc)))
                else:
                    report.refilled.append(damage)

    async def _take(self, ledger_id: int) -> None:
        """Repair one published ledger if no other daemon holds its lock."""
        store = self._ctx.store
        try:
            await store.register(repair_lock_path(ledger_id), self.daemon_id.encode())
        except NodeExistsError:
            return  # another daemon repairs it
        try:
            try:
                raw, _ = await store.get(under_replicated_path(ledger_id))
            except NodeNotFoundError:
                return  # repaired meanwhile by the lock's previous holder
            try:
                doc = repair_doc(raw, ledger_id)
            except ValueError as exc:  # a newer format too: left to a walog that reads it
                if ledger_id not in self._unreadable:
                    self._unreadable.add(ledger_id)
                    _log.error("repair record not read", ledger=ledger_id, error=str(exc))
                return
            self._unreadable.discard(ledger_id)
            lost = set(doc.get("lost", []))
            started = time.monotonic()
            report = await recover(
                self._ctx,
                passwords=self._passwords,
                is_lost=lambda bookie: bookie in lost,
                ledgers={ledger_id},
                placement=self._placement,
            )
            damaged_on = set(doc.get("damaged_on", []))
            if damaged_on:
                await self._replace_damaged(ledger_id, damaged_on, report)
            self._on_report(report, time.monotonic() - started)
            if not report.unrepairable:
                self.repaired_ledgers.append(ledger_id)
                with contextlib.suppress(NodeNotFoundError):
                    await store.delete(under_replicated_path(ledger_id))
        finally:
            await store.unregister(repair_lock_path(ledger_id))


__all__ = ["AUDITOR_ELECTION", "Daemon", "audit"]

"""Ensemble changes of a ledger's writer: replacing the bookies that failed
(docs/protocol.md, "Ensemble changes").

A bookie that errors or times out is replaced by an ensemble change: a new fragment starting
at the first entry not yet completed, compare-and-swapped into the ledger's metadata, then
the pending entries of that fragment are resent to the replacement. Changes run one at a
time, and no add completes while one is in flight: an ack from the bookie being replaced
must not count for the new fragment. Once a change is written, what the replaced bookie
acknowledged or was sent no longer counts (the writer clears those bits of every pending
add before resending).

A failed bookie that nothing could replace leaves its index out of the write quorums
(entries then have one copy fewer). Like BookKeeper's delayed ensemble change, the writer
keeps looking: once a bookie is available again, the next entries go to a new fragment with
it. The entries written meanwhile stay as they are (re-replicating them is the job of
``walog autorecovery``). When the indexes left can no longer make an ack quorum, the writer
stops with NotEnoughBookiesError.

:class:`EnsembleChanges` holds the writer's current ensemble and which of its indexes
failed; the writer (walog/ledger/writer.py) reads them to send, and calls back through
:class:`WriterHooks`. The pure rules (the fragment list after a change, whether quorums
stay possible) are in :mod:`walog.ledger.ensemble`; which bookies replace the failed ones is
the placement policy's rule (:mod:`walog.ledger.placement`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from walog import mutations
from walog._loggers import get_logger
from walog.errors import (
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    NotEnoughBookiesError,
    WalogError,
)
from walog.ledger.context import LedgerContext, metadata_retrying
from walog.ledger.ensemble import (
    placement_candidates,
    quorum_possible,
    replace_in_ensemble,
    with_new_fragment,
)
from walog.ledger.placement import PlacementPolicy
from walog.metadata.layout import LedgerMetadata

log = get_logger(__name__)

UNREPLACEABLE_RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Pauses before looking again for bookies to replace the ones no bookie could replace
(the writer goes on with the rest meanwhile, as long as the ack quorum holds), in turn."""


@dataclasses.dataclass(slots=True)
class LedgerRecord:
    """A ledger's metadata as its writer last wrote or read it, and that version: the
    version the writer's compare-and-swaps (ensemble changes, the close) expect."""

    metadata: LedgerMetadata
    version: int


@dataclasses.dataclass(frozen=True, slots=True)
class WriterHooks:
    """What an ensemble change calls back in the writer whose ensemble it changes.

    Attributes:
        appending: whether the writer still takes appends (open, not stopped).
        stopped: whether the writer stopped (failed): a change in flight gives up.
        first_uncompleted: the first entry not yet completed, where a new fragment starts
            (stable while a change is in flight: completions are held).
        fail: stop the writer with an error.
        switch: the change was written: the bookies at the indexes of the bit mask were
            replaced; the writer takes the new ensemble and resends its pending adds.
        settle: the change ended: complete the adds that reached their ack quorum.
    """

    appending: Callable[[], bool]
    stopped: Callable[[], bool]
    first_uncompleted: Callable[[], int]
    fail: Callable[[WalogError], None]
    switch: Callable[[int], None]
    settle: Callable[[], None]


class EnsembleChanges:
    """The ensemble of one ledger writer and its changes, one at a time.

    Args:
        ctx: the metadata store, the bookie pool, the metrics.
        record: the ledger's metadata and version, shared with the writer.
        placement: the policy that chooses replacements.
        hooks: the writer's side (see :class:`WriterHooks`).
    """

    def __init__(
        self,
        ctx: LedgerContext,
        record: LedgerRecord,
        placement: PlacementPolicy,
        hooks: WriterHooks,
    ) -> None:
        metadata = record.metadata
        self._ctx = ctx
        self._record = record
        self._placement = placement
        self._hooks = hooks
        self._loop = asyncio.get_running_loop()
        self._ledger_id = metadata.ledger_id
        self._e = metadata.ensemble_size
        self._qw = metadata.write_quorum
        self._qa = metadata.ack_quorum
        self.ensemble: list[str] = list(metadata.last_ensemble)
        """The bookies of the current fragment, by ensemble index."""
        self.failed: dict[int, str] = {}
        """Ensemble index -> the bookie that failed there, to be replaced."""
        self.unreplaceable: set[int] = set()
        """Failed indexes no bookie could replace (left out of the write quorums)."""
        self._replaced: set[str] = set()  # bookies that failed once: never chosen again
        self.task: asyncio.Task[None] | None = None
        """The change under way, if any."""
        self.changing = False
        """True while a change is in flight: no add completes meanwhile."""
        self._retry_timer: asyncio.TimerHandle | None = None  # next look for replacements
        self._retries = 0

    def out_of_quorum(self) -> set[int]:
        """The indexes nothing is sent to now: failed, or failed and unreplaceable."""
        return self.failed.keys() | self.unreplaceable

    def bookie_failed(self, index: int, bookie: str) -> None:
        """The bookie at ``index``, neither replaced nor out of the quorums yet, failed:
        replace it (a change starts unless one is under way; that one takes it too)."""
        self.failed[index] = bookie
        if self.task is None:
            self.task = self._loop.create_task(self._change())

    def cancel_retry(self) -> None:
        """Stop looking again for replacements of the unreplaceable indexes."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None

    async def _change(self, *, retry: bool = False) -> None:
        self.changing = True
        try:
            while (self.failed or retry) and not self._hooks.stopped():
                retry = False
                await self._change_once()
        except WalogError as exc:
            self._hooks.fail(exc)
        except Exception as exc:  # a bug must not leave appends hanging forever
            self._hooks.fail(
                WalogError(f"ensemble change of ledger {self._ledger_id} failed: {exc!r}")
            )
            raise
        finally:
            self.changing = False
            self.task = None
            self._hooks.settle()
            self._arm_retry()

    def _arm_retry(self) -> None:
        if not self.unreplaceable:
            self._retries = 0
            return
        if self._retry_timer is None and self._hooks.appending():
            delay = UNREPLACEABLE_RETRY_S[min(self._retries, len(UNREPLACEABLE_RETRY_S) - 1)]
            self._retry_timer = self._loop.call_later(delay, self._retry_unreplaceable)

    def _retry_unreplaceable(self) -> None:
        self._retry_timer = None
        if not self.unreplaceable or not self._hooks.appending():
            return
        if self.task is None:  # else the running change looks too, then re-arms
            self._retries += 1
            self.task = self._loop.create_task(self._change(retry=True))

    async def _change_once(self) -> None:
        failed = dict(self.failed)
        targets = set(failed) | self.unreplaceable
        async for attempt in metadata_retrying():
            with attempt:
                available, racks = await placement_candidates(self._ctx.store, self._placement)
        if self._hooks.stopped():
            return
        replacements = self._placement.choose_replacements(
            self.ensemble,
            targets,
            available,
            excluded=self._replaced | set(failed.values()),
            write_quorum=self._qw,
            racks=racks,
        )
        if replacements:
            await self._write_fragment(replacements)
            if self._hooks.stopped():
                return
            if self._ctx.metrics is not None:
                self._ctx.metrics.ensemble_changes += 1
        for index, bookie in failed.items():
            # A failure recorded meanwhile (of another bookie at this index) stays queued.
            if index not in replacements and self.failed.get(index) == bookie:
                del self.failed[index]
                self.unreplaceable.add(index)
        if not quorum_possible(self._e, self._qw, self._qa, self.unreplaceable):
            dead = sorted(self.ensemble[i] for i in self.unreplaceable)
            raise NotEnoughBookiesError(
                f"ledger {self._ledger_id} lost bookies {', '.join(dead)} and no other "
                f"bookie is available to replace them (available: {', '.join(available)}); "
                f"ack_quorum={self._qa} can no longer be reached"
            )

    async def _write_fragment(self, replacements: dict[int, str]) -> None:
        # Completions are held while changing, so the first entry not yet completed is
        # stable: the new fragment starts there and covers every pending entry.
        first = self._hooks.first_uncompleted()
        new_ensemble = replace_in_ensemble(self.ensemble, replacements)
        record = self._record
        early = mutations.enabled("ensemble_acks_before_writing")
        if early:  # the planted bug: resend, and complete adds, before the change is written
            self._switch(new_ensemble, replacements)
            self.changing = False
            self._hooks.settle()
        async for attempt in metadata_retrying():
            with attempt:
                if record.metadata.state != "OPEN":
                    # Closed meanwhile (close waits for changes, so only by a bug): a
                    # CLOSED ledger's fragments must never change.
                    raise LedgerClosedError(f"ledger {self._ledger_id} is {record.metadata.state}")
                metadata = record.metadata.with_changes(
                    ensembles=with_new_fragment(record.metadata.ensembles, first, new_ensemble)
                )
                try:
                    record.version = await self._ctx.write_metadata(metadata, record.version)
                except MetadataConflictError:
                    await self._reread_open()
                    raise
                record.metadata = metadata
        log.info(
            "ensemble changed",
            ledger_id=self._ledger_id,
            first_entry_id=first,
            ensemble=list(new_ensemble),
        )
        if not early:
            self._switch(new_ensemble, replacements)

    def _switch(self, new_ensemble: tuple[str, ...], replacements: dict[int, str]) -> None:
        """Take the new ensemble and have the writer resend its pending adds to it."""
        for index in replacements:
            self._replaced.add(self.ensemble[index])
        old_ensemble, self.ensemble = self.ensemble, list(new_ensemble)
        # The replaced indexes are healthy again: sends skip failed and unreplaceable
        # indexes, so they must leave both sets before the pending entries are resent.
        moved = 0
        for index in replacements:
            if self.failed.get(index) == old_ensemble[index]:
                del self.failed[index]
            self.unreplaceable.discard(index)
            moved |= 1 << index
        self._hooks.switch(moved)

    async def _reread_open(self) -> None:
        """After a lost CAS: adopt the current metadata if still OPEN, else stop."""
        metadata, version = await self._ctx.read_metadata(self._ledger_id)
        if metadata.state != "OPEN":
            raise LedgerFencedError(
                f"ledger {self._ledger_id} is {metadata.state}: it was fenced by recovery"
            )
        self._record.metadata, self._record.version = metadata, version


__all__ = ["UNREPLACEABLE_RETRY_S", "EnsembleChanges", "LedgerRecord", "WriterHooks"]

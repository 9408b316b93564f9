"""Ledger recovery: fence the ledger, find its last entry, close it (docs/protocol.md,
"Fencing and recovery").

A recovering reader makes sure the old writer can add nothing more, that every entry the old
writer may have acknowledged survives on an ack quorum, and that every recoverer agrees on one
last entry. The steps, all in :func:`recover`:

1. CAS the metadata OPEN -> IN_RECOVERY, so the writer can no longer change its ensemble.
   Already IN_RECOVERY: a previous recoverer may have died; carry on. CLOSED: nothing to do.
2. Fence every bookie of the last fragment. The ledger is fenced once explicit answers cover
   every write quorum with ``Qw - Qa + 1`` bookies: every ack quorum then holds a bookie that
   refuses plain adds, so the old writer cannot complete another entry.
3. Start at ``max(highest LAC in the fence answers, first entry of the last fragment - 1)``:
   everything up to there was acknowledged and replicated (a fragment starts at the first
   entry its writer had not completed). Earlier fragments are never re-read.
4. Read forward with fencing reads, entry by entry (a few read ahead). An entry is found when
   any bookie of its write set returns it; it is absent only when ``Qw - Qa + 1`` bookies of
   its write set explicitly say "no such entry". Unknown answers (timeouts, errors) are asked
   again and never make an entry absent: a paused bookie delays recovery, it never truncates.
5. Write each found entry back to its whole write set with the recovery flag (which passes
   the fence) and wait for ``Qa`` acknowledgements. A bookie that fails here is replaced in a
   local copy of the metadata (a new fragment); the copy is written only by the close.
6. CAS-close with the last found entry. On a conflict, a ledger someone else CLOSED is
   accepted as it is, so concurrent recoverers converge on one last entry.

Every step is idempotent, so a failed attempt (too many unknown answers, a lost CAS) restarts
from step 1; the ledger stays IN_RECOVERY until some recoverer closes it.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from walog import mutations
from walog._loggers import get_logger
from walog.errors import (
    BookieError,
    BookieUnavailableError,
    MetadataConflictError,
    NotEnoughBookiesError,
    UnauthorizedError,
    WalogError,
    is_retriable,
)
from walog.ledger.context import LedgerContext
from walog.ledger.quorum import Answer, QuorumCoverage
from walog.ledger.readops import (
    EntryProbe,
    Outcome,
    ask,
    classify_fence,
    fan_out,
    fan_out_staggered,
    read_last_add_confirmed,
    write_set_bookies,
)
from walog.metadata.layout import AVAILABLE_BOOKIES, LedgerMetadata
from walog.transport.base import AddReply, FenceReply, ReadReply, StoredEntry
from walog.wire.digest import entry_digest
from walog.wire.durability import Durability
from walog.wire.status import Status

log = get_logger(__name__)

RECOVERY_ATTEMPTS = 8
"""Whole recovery attempts before giving up (the ledger then stays IN_RECOVERY)."""
ENTRY_READ_ROUNDS = 4
"""Rounds of asking the unknown bookies of one entry again before an attempt restarts."""
READ_AHEAD = 64
"""Entries probed concurrently, ahead of the one whose answer is awaited."""
SPECULATIVE_READ_S = 0.25
"""A recovery read asks the rest of the write set after this long without an answer."""
WRITE_BACK_BATCH = 256
"""At most this many found entries are written back together."""
BULK_READ = 256
"""Entries asked per fencing range read when every bookie holds every entry."""
BULK_MIN_RUN = 32
"""Range reads stop once one returns a shorter run than this."""
WRITE_BACK_ROUNDS = 4
"""Rounds (with bookie replacements between them) for one write-back batch."""


def _wait() -> wait_exponential:
    return wait_exponential(multiplier=0.05, max=2.0)


def recovery_start(metadata: LedgerMetadata, max_lac: int) -> int:
    """The last entry known to be confirmed, from which recovery reads forward.

    ``max(max_lac, first entry of the last fragment - 1)``: LACs reported by bookies were
    confirmed by the writer, and the writer starts a fragment only at its first incomplete
    entry, so everything before the last fragment was complete.
    """
    if mutations.enabled("recovery_starts_at_lac"):
        return max_lac
    first_of_last = metadata.ensembles[-1][0]
    return max(max_lac, first_of_last - 1)


class CloseConflict(enum.Enum):
    """What a recoverer does when its close CAS loses."""

    ACCEPT = "accept"  # someone closed it: their last entry is the ledger's last entry
    RETRY = "retry"  # still IN_RECOVERY over the same fragments: CAS again on the new version
    RESTART = "restart"  # the fragments changed under us: recover again from the start


def close_conflict_action(current: LedgerMetadata, started_from: LedgerMetadata) -> CloseConflict:
    """Decide how to proceed after a lost close CAS, from the re-read metadata."""
    if current.is_closed:
        return CloseConflict.ACCEPT
    if current.state == "IN_RECOVERY" and current.ensembles == started_from.ensembles:
        return CloseConflict.RETRY
    return CloseConflict.RESTART


def replace_in_last_fragment(
    metadata: LedgerMetadata, from_entry: int, replacements: dict[str, str]
) -> LedgerMetadata:
    """A copy of ``metadata`` whose ensemble from ``from_entry`` on has bookies replaced.

    ``from_entry`` must lie in the last fragment. When the last fragment starts at
    ``from_entry`` its ensemble is rewritten; otherwise a new fragment starts there.
    """
    first, ensemble = metadata.ensembles[-1]
    if from_entry < first:
        raise ValueError(f"entry {from_entry} is not in the last fragment (starts at {first})")
    new_ensemble = tuple(replacements.get(b, b) for b in ensemble)
    if first == from_entry:
        fragments = (*metadata.ensembles[:-1], (first, new_ensemble))
    else:
        fragments = (*metadata.ensembles, (from_entry, new_ensemble))
    return metadata.with_changes(ensembles=fragments)


class _WriteBackPipe:
    """Found entries in, write-back batches out: one batch written at a time, the next one
    filling meanwhile; errors surface on the next :meth:`put` or on :meth:`finish`."""

    def __init__(self, write: Callable[[list[StoredEntry]], Coroutine[Any, Any, None]]) -> None:
        self._write = write
        self._batch: list[StoredEntry] = []
        self._writing: asyncio.Task[None] | None = None

    async def put(self, stored: StoredEntry, *, more_ready: bool) -> None:
        """Queue a found entry. The batch is handed over when full, or when the previous
        write-back is done and no further entry is ready yet."""
        self._batch.append(stored)
        idle = self._writing is None or self._writing.done()
        if len(self._batch) >= WRITE_BACK_BATCH or (idle and not more_ready):
            await self._flush()

    async def finish(self) -> None:
        """Write back everything queued and wait for it."""
        await self._flush()
        if self._writing is not None:
            await self._writing

    async def cancel(self) -> None:
        """Stop a write-back still running (recovery failed)."""
        if self._writing is not None and not self._writing.done():
            self._writing.cancel()
            await asyncio.gather(self._writing, return_exceptions=True)

    async def _flush(self) -> None:
        if self._writing is not None:
            await self._writing
            self._writing = None
        if self._batch:
            self._writing = asyncio.create_task(self._write(self._batch))
            self._batch = []


async def recover(
    ctx: LedgerContext, ledger_id: int, master_key: bytes
) -> tuple[LedgerMetadata, int]:
    """Fence and recover a ledger; return its CLOSED metadata and that record's version.

    Raises:
        NoSuchLedgerError: the ledger does not exist.
        UnauthorizedError: a bookie refused ``master_key``.
        BookieUnavailableError: too few bookies answered, after several attempts (the
            ledger stays IN_RECOVERY; recovering again later continues safely).
        NotEnoughBookiesError: a write-back lost bookies and none can replace them.
    """
    metrics = ctx.metrics
    if metrics is None:
        return await _recover(ctx, ledger_id, master_key)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        closed = await _recover(ctx, ledger_id, master_key)
    except WalogError:
        metrics.failed_recoveries += 1
        raise
    metrics.recovery_duration.observe(loop.time() - started)
    return closed


async def _recover(
    ctx: LedgerContext, ledger_id: int, master_key: bytes
) -> tuple[LedgerMetadata, int]:
    def note_failure(state: RetryCallState) -> None:
        # Each failed attempt is named: a recovery that keeps failing says why.
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "ledger recovery attempt failed; trying again",
            ledger_id=ledger_id,
            attempt=state.attempt_number,
            error=f"{type(error).__name__}: {error}",
        )

    async for attempt in AsyncRetrying(
        retry=retry_if_exception(is_retriable),
        stop=stop_after_attempt(RECOVERY_ATTEMPTS),
        wait=_wait(),
        before_sleep=note_failure,
        reraise=True,
    ):
        with attempt:
            return await _Recovery(ctx, ledger_id, master_key).run()
    raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover


class _Recovery:
    """One recovery attempt of one ledger."""

    def __init__(self, ctx: LedgerContext, ledger_id: int, master_key: bytes) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._key = master_key
        self._origin: LedgerMetadata
        self._local: LedgerMetadata
        self._version = -1
        self._fenced: set[str] = set()  # bookies that confirmed this recovery's fence

    async def run(self) -> tuple[LedgerMetadata, int]:
        metadata, version = await self._ctx.read_metadata(self._ledger_id)
        if metadata.is_closed:
            return metadata, version
        if metadata.state == "OPEN":
            metadata = metadata.with_changes(state="IN_RECOVERY")
            # A lost CAS raises MetadataConflictError (retriable): the attempt starts over.
            version = await self._ctx.write_metadata(metadata, version)
        self._origin = self._local = metadata
        self._version = version

        max_lac = await self._fence()
        start = recovery_start(metadata, max_lac)
        log.info("ledger recovery reading forward", ledger_id=self._ledger_id, start=start)
        last = await self._read_forward(start)
        return await self._close(last)

    async def _fence(self) -> int:
        """Fence the last fragment; return the highest LAC in the answers."""
        md = self._origin
        if mutations.enabled("no_fence_on_recovery_reads"):
            return await read_last_add_confirmed(self._ctx, md)
        ensemble = md.last_ensemble
        coverage = QuorumCoverage(md.ensemble_size, md.write_quorum, md.ack_quorum)
        max_lac = -1
        answers: dict[str, str] = {}

        def on_outcome(index: int, outcome: Outcome[FenceReply]) -> bool:
            nonlocal max_lac
            answers[ensemble[index]] = (
                f"{type(outcome).__name__}: {outcome}"
                if isinstance(outcome, BookieError)
                else outcome.status.name
            )
            answer = classify_fence(self._ledger_id, ensemble[index], outcome)
            coverage.add(index, answer)
            if answer is Answer.POSITIVE and not isinstance(outcome, BookieError):
                max_lac = max(max_lac, outcome.lac)
                self._fenced.add(ensemble[index])
            return coverage.covered()

        # Fences still running when coverage holds are left to finish: each one more fenced
        # bookie is one more refusing the old writer.
        await fan_out(
            {
                i: ask(self._ctx, b, lambda c: c.fence(self._ledger_id, self._key))
                for i, b in enumerate(ensemble)
            },
            on_outcome,
            detach=True,
        )
        if not coverage.covered():
            told = "; ".join(f"{b}: {answers.get(b, 'no answer')}" for b in ensemble)
            raise BookieUnavailableError(
                f"cannot fence ledger {self._ledger_id}: need "
                f"{md.write_quorum - md.ack_quorum + 1} fenced bookies in every write quorum "
                f"of {', '.join(ensemble)} (answers: {told})"
            )
        return max_lac

    async def _read_forward(self, start: int) -> int:
        """Find the entries after ``start`` in order and write back each one found; return
        the last entry found (``start`` when none).

        Without striping (``Qw == E``) every bookie may hold a run of consecutive entries,
        which fencing range reads fetch in bulk first. Then entries are probed one by one,
        ``READ_AHEAD`` at a time, until the first absent one. Found entries are written back
        in batches, one batch at a time, while reading goes on.
        """
        last = start
        pipe = _WriteBackPipe(self._write_back)
        probes: collections.deque[asyncio.Task[EntryProbe]] = collections.deque()
        try:
            if self._origin.write_quorum == self._origin.ensemble_size:
                async for stored in self._bulk(start + 1):
                    await pipe.put(stored, more_ready=True)
                    last = stored.entry_id
            next_entry = last + 1
            while True:
                while len(probes) < READ_AHEAD:
                    probes.append(asyncio.create_task(self._probe(next_entry)))
                    next_entry += 1
                probe = await probes.popleft()
                if probe.entry is None:  # absent: the ledger ends before it
                    break
                await pipe.put(probe.entry, more_ready=probes[0].done())
                last = probe.entry_id
            await pipe.finish()
            return last
        finally:
            pending = [t for t in probes if not t.done()]
            for task in pending:
                task.cancel()
            await pipe.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _bulk(self, first: int) -> AsyncIterator[StoredEntry]:
        """Yield consecutive entries from ``first`` fetched by fencing range reads of the
        last fragment's bookies; stop when none returns ``first``. Says nothing about
        absence: the per-entry probes decide that."""
        ensemble = self._origin.last_ensemble
        while True:
            start = first % len(ensemble)
            order = [ensemble[(start + i) % len(ensemble)] for i in range(len(ensemble))]
            best: list[StoredEntry] = []

            def on_outcome(
                bookie: str,
                outcome: Outcome[ReadReply],
                at: int = first,
                best: list[StoredEntry] = best,
            ) -> bool:
                if isinstance(outcome, BookieError):
                    return False
                if outcome.status is Status.UNAUTHORIZED:
                    raise UnauthorizedError(
                        f"bookie {bookie} refused the master key of ledger {self._ledger_id}"
                    )
                run: list[StoredEntry] = []
                if outcome.status is Status.OK:
                    for stored in outcome.entries:
                        if stored.entry_id != at + len(run):
                            break
                        run.append(stored)
                if len(run) > len(best):
                    best[:] = run
                return bool(run)

            await fan_out_staggered(
                {b: functools.partial(self._read, b, first, first + BULK_READ - 1) for b in order},
                on_outcome,
                delay=SPECULATIVE_READ_S,
            )
            for stored in best:
                yield stored
            first += len(best)
            if len(best) < BULK_MIN_RUN:
                # The end of the ledger, or bookies with gaps (each missed entries that an
                # ack quorum without it took): entry-by-entry probes do better from here.
                return

    async def _read(self, bookie: str, first: int, last: int) -> ReadReply:
        """A recovery read: it fences the ledger on the bookie before reading.

        Bookies that already confirmed this recovery's fence are read without the flag:
        their fence is on disk, and asking again would cost each read another journal sync.
        """
        fence = bookie not in self._fenced and not mutations.enabled("no_fence_on_recovery_reads")
        reply = await self._ctx.pool.get(bookie).read(
            self._ledger_id, first, last, fence=fence, master_key=self._key
        )
        # The bookie reads only after its fence succeeded: a read answer means fenced.
        if fence and reply.fenced and reply.status in (Status.OK, Status.NO_SUCH_ENTRY):
            self._fenced.add(bookie)
        return reply

    async def _probe(self, entry_id: int) -> EntryProbe:
        """Find out with fencing reads whether ``entry_id`` exists.

        The first bookie of the write set is asked at once; the others only when it does
        not settle the question (an error, a timeout, "no such entry"), or speculatively
        after ``SPECULATIVE_READ_S``. Most entries past the start exist, so one read per
        entry is the common case.
        """
        md = self._origin
        bookies = write_set_bookies(md, entry_id)
        probe = EntryProbe(self._ledger_id, entry_id, md.write_quorum, md.ack_quorum)

        def on_outcome(bookie: str, outcome: Outcome[ReadReply]) -> bool:
            probe.record(bookie, outcome)
            return probe.decided

        async for attempt in AsyncRetrying(
            retry=retry_if_exception(is_retriable),
            stop=stop_after_attempt(ENTRY_READ_ROUNDS),
            wait=_wait(),
            reraise=True,
        ):
            with attempt:
                await fan_out_staggered(
                    {
                        b: functools.partial(self._read, b, entry_id, entry_id)
                        for b in probe.unknown(bookies)
                    },
                    on_outcome,
                    delay=SPECULATIVE_READ_S,
                )
                if not probe.decided:
                    raise BookieUnavailableError(
                        f"ledger {self._ledger_id} entry {entry_id}: not found, and too few "
                        f"bookies of {', '.join(bookies)} said it is absent"
                    )
        return probe

    async def _write_back(self, entries: list[StoredEntry]) -> None:
        """Write ``entries`` (consecutive) to their whole write sets with the recovery flag
        until each has ``Qa`` acknowledgements from its write set in the local metadata.

        When some entry falls short, the failed bookies are replaced from the first such
        entry on (a new local fragment); every entry from there is then checked against its
        new write set, because an acknowledgement from a replaced bookie no longer counts.
        """
        md = self._local
        acked: dict[int, set[str]] = {s.entry_id: set() for s in entries}
        todo = entries
        for _round in range(WRITE_BACK_ROUNDS):
            failed: set[str] = set()
            await asyncio.gather(*(self._send(s, acked[s.entry_id], failed) for s in todo))
            short = [s for s in todo if not self._replicated(s.entry_id, acked[s.entry_id])]
            if not short:
                return
            first = short[0].entry_id
            await self._replace(failed & set(self._local.last_ensemble), first)
            todo = [s for s in todo if s.entry_id >= first]
        raise BookieUnavailableError(
            f"ledger {self._ledger_id}: could not write entry {todo[0].entry_id} back to "
            f"{md.ack_quorum} bookies of its write set"
        )

    def _replicated(self, entry_id: int, acked: set[str]) -> bool:
        """True when ``Qa`` bookies of the entry's current write set acknowledged it."""
        current = write_set_bookies(self._local, entry_id)
        return sum(1 for b in current if b in acked) >= self._local.ack_quorum

    async def _send(self, stored: StoredEntry, acked: set[str], failed: set[str]) -> None:
        """One round of recovery adds of ``stored`` to the bookies of its write set that
        have not acknowledged it; returns once ``Qa`` have, or every one answered."""
        entry_id = stored.entry_id
        digest = entry_digest(self._ledger_id, entry_id, stored.lac, stored.data)

        async def add(bookie: str) -> AddReply:
            # Recovered entries are written PERSISTENT whatever the ledger's durability:
            # they are about to become part of a closed ledger.
            return await self._ctx.pool.get(bookie).add(
                self._ledger_id,
                entry_id,
                stored.lac,
                stored.data,
                digest,
                self._key,
                recovery=True,
                durability=Durability.PERSISTENT,
            )

        def on_outcome(bookie: str, outcome: Outcome[AddReply]) -> bool:
            if isinstance(outcome, BookieError) or outcome.status is not Status.OK:
                if not isinstance(outcome, BookieError) and outcome.status is Status.UNAUTHORIZED:
                    raise UnauthorizedError(
                        f"bookie {bookie} refused the master key of ledger {self._ledger_id}"
                    )
                failed.add(bookie)
            else:
                acked.add(bookie)
            return self._replicated(entry_id, acked)

        if self._replicated(entry_id, acked):
            return
        targets = [b for b in write_set_bookies(self._local, entry_id) if b not in acked]
        # Adds still running once the entry is replicated finish on their own.
        await fan_out({b: add(b) for b in targets}, on_outcome, detach=True)

    async def _replace(self, bad: set[str], from_entry: int) -> None:
        """Replace ``bad`` bookies from ``from_entry`` on, in the local metadata only."""
        if not bad:
            return
        available = await self._ctx.store.children(AVAILABLE_BOOKIES)
        in_use = set(self._local.last_ensemble) | set(self._origin.last_ensemble)
        candidates = sorted(b for b in available if b not in in_use)
        if len(candidates) < len(bad):
            raise NotEnoughBookiesError(
                f"ledger {self._ledger_id}: {len(bad)} bookie(s) failed during recovery "
                f"({', '.join(sorted(bad))}) but only {len(candidates)} spare bookie(s) "
                "are available"
            )
        replacements = dict(zip(sorted(bad), candidates, strict=False))
        self._local = replace_in_last_fragment(self._local, from_entry, replacements)
        log.info(
            "ledger recovery replaced bookies",
            ledger_id=self._ledger_id,
            from_entry=from_entry,
            replacements=replacements,
        )

    async def _close(self, last: int) -> tuple[LedgerMetadata, int]:
        closed = self._local.with_changes(state="CLOSED", last_entry_id=last)
        try:
            version = await self._ctx.write_metadata(closed, self._version)
        except MetadataConflictError:
            current, current_version = await self._ctx.read_metadata(self._ledger_id)
            action = close_conflict_action(current, self._origin)
            if action is CloseConflict.ACCEPT:
                log.info(
                    "ledger closed by another recoverer",
                    ledger_id=self._ledger_id,
                    last_entry_id=current.last_entry_id,
                )
                return current, current_version
            if action is CloseConflict.RESTART:
                raise
            closed = current.with_changes(
                state="CLOSED", last_entry_id=last, ensembles=self._local.ensembles
            )
            # A second loss raises MetadataConflictError again: the attempt starts over.
            version = await self._ctx.write_metadata(closed, current_version)
        log.info("ledger recovered", ledger_id=self._ledger_id, last_entry_id=last)
        return closed, version


__all__ = [
    "CloseConflict",
    "close_conflict_action",
    "recover",
    "recovery_start",
    "replace_in_last_fragment",
]

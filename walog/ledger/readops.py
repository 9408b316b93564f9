"""Quorum read operations shared by recovery and readers.

Two kinds of pieces live here:

- pure classifications of bookie answers (what counts as an explicit answer, what is
  *unknown*), and :class:`EntryProbe`, which decides whether one entry was found or is
  absent from the answers of its write set;
- small I/O helpers over :class:`walog.transport.base.BookiePool`: running requests to many
  bookies at once and stopping as soon as a quorum rule is met (:func:`fan_out`), reading one
  entry from its write set, reading a range, and asking the last fragment for its LAC.

Timeouts and errors are *unknown* answers: they never count as "no such entry".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

from walog import mutations
from walog.errors import (
    BookieError,
    BookieUnavailableError,
    DigestMismatchError,
    NoSuchEntryError,
    UnauthorizedError,
)
from walog.ledger.context import LedgerContext
from walog.ledger.quorum import Answer, QuorumCoverage, entry_absent, write_set
from walog.metadata.layout import LedgerMetadata
from walog.transport.base import BookieClient, FenceReply, ReadLacReply, ReadReply, StoredEntry
from walog.wire.status import Status

K = TypeVar("K")
T = TypeVar("T")

Outcome: TypeAlias = T | BookieError
"""A bookie's reply, or the BookieError that stands for an unknown answer."""

# Requests still running after a fan-out stopped early. Kept referenced until they finish so
# the event loop does not destroy them while pending.
_background: set[asyncio.Future[Any]] = set()

# Statuses that are an explicit "this bookie does not have it": the only answers that may
# ever make an entry absent.
_EXPLICIT_ABSENT = frozenset({Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER})


def _unauthorized(ledger_id: int, bookie: str) -> UnauthorizedError:
    return UnauthorizedError(
        f"bookie {bookie} refused the master key of ledger {ledger_id}: wrong ledger password"
    )


def classify_fence(ledger_id: int, bookie: str, outcome: Outcome[FenceReply]) -> Answer:
    """POSITIVE when the bookie confirmed the fence, UNKNOWN otherwise.

    Raises:
        UnauthorizedError: the bookie refused the master key.
    """
    if isinstance(outcome, BookieError):
        return Answer.UNKNOWN
    if outcome.status is Status.UNAUTHORIZED:
        raise _unauthorized(ledger_id, bookie)
    # OK: fenced now; FENCED: fenced before. Either way the bookie refuses plain adds.
    if outcome.status in (Status.OK, Status.FENCED):
        return Answer.POSITIVE
    return Answer.UNKNOWN


def classify_lac(ledger_id: int, bookie: str, outcome: Outcome[ReadLacReply]) -> Answer:
    """POSITIVE for an explicit LAC answer (a bookie without the ledger knows LAC -1)."""
    if isinstance(outcome, BookieError):
        return Answer.UNKNOWN
    if outcome.status is Status.UNAUTHORIZED:
        raise _unauthorized(ledger_id, bookie)
    if outcome.status is Status.OK or outcome.status in _EXPLICIT_ABSENT:
        return Answer.POSITIVE
    return Answer.UNKNOWN


def lac_of(reply: ReadLacReply) -> int:
    """The highest LAC a LAC answer shows: the bookie's, or the one in its last entry."""
    if reply.status is not Status.OK:
        return -1
    embedded = reply.last_entry.lac if reply.last_entry is not None else -1
    return max(reply.lac, embedded)


class EntryProbe:
    """Decides, from the answers of an entry's write set, whether the entry exists.

    The entry is *found* as soon as one bookie returns it (its digest was verified by the
    transport). It is *absent* only when ``Qw - Qa + 1`` bookies of its write set explicitly
    said they do not have it: then no ack quorum can have acknowledged it. Unknown answers
    (timeouts, errors, digest mismatches) never count towards absence.
    """

    def __init__(self, ledger_id: int, entry_id: int, write_quorum: int, ack_quorum: int) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self._write_quorum = write_quorum
        self._ack_quorum = ack_quorum
        self._answers: dict[str, Answer] = {}
        self.entry: StoredEntry | None = None

    def record(self, bookie: str, outcome: Outcome[ReadReply]) -> None:
        """Take one bookie's answer to a read of this entry (the latest answer wins).

        Raises:
            UnauthorizedError: the bookie refused the master key.
        """
        if isinstance(outcome, BookieError):
            unknown_as_absent = mutations.enabled("timeout_counts_as_absent")
            self._answers[bookie] = Answer.POSITIVE if unknown_as_absent else Answer.UNKNOWN
            return
        if outcome.status is Status.UNAUTHORIZED:
            raise _unauthorized(self.ledger_id, bookie)
        if outcome.status is Status.OK:
            for stored in outcome.entries:
                if stored.entry_id == self.entry_id:
                    self.entry = stored
                    self._answers[bookie] = Answer.NEGATIVE
                    return
            # An explicit, successful answer that does not contain the entry.
            self._answers[bookie] = Answer.POSITIVE if not outcome.entries else Answer.UNKNOWN
            return
        if outcome.status in _EXPLICIT_ABSENT:
            self._answers[bookie] = Answer.POSITIVE
            return
        self._answers[bookie] = Answer.UNKNOWN

    @property
    def found(self) -> bool:
        """True once a bookie returned the entry."""
        return self.entry is not None

    @property
    def absent(self) -> bool:
        """True when enough explicit "no such entry" answers prove no ack quorum has it."""
        return self.entry is None and entry_absent(
            self._answers.values(), self._write_quorum, self._ack_quorum
        )

    @property
    def decided(self) -> bool:
        """True when the entry is found or proven absent."""
        return self.found or self.absent

    def unknown(self, bookies: Sequence[str]) -> list[str]:
        """The bookies of ``bookies`` whose answer is missing or unknown."""
        return [b for b in bookies if self._answers.get(b, Answer.UNKNOWN) is Answer.UNKNOWN]


async def ask(ctx: LedgerContext, bookie: str, op: Callable[[BookieClient], Awaitable[T]]) -> T:
    """Run ``op`` on the connection to ``bookie``; the connection is looked up only when
    the request runs, so a bookie the pool cannot reach is an unknown answer like any other
    ``BookieError``."""
    return await op(ctx.pool.get(bookie))


async def _outcome(call: Awaitable[T]) -> Outcome[T]:
    try:
        return await call
    except BookieError as exc:
        return exc


async def fan_out(
    calls: Mapping[K, Awaitable[T]],
    on_outcome: Callable[[K, Outcome[T]], bool],
    *,
    detach: bool = False,
) -> None:
    """Run ``calls`` concurrently and feed each outcome to ``on_outcome`` as it arrives.

    Stops as soon as ``on_outcome`` returns True (a quorum rule is met) or every call has
    answered. Calls still running are cancelled, or with ``detach=True`` left to finish on
    their own (fence requests: every bookie that gets the fence is one more that refuses the
    old writer). An exception raised by ``on_outcome`` cancels the rest and propagates.
    """
    tasks: dict[asyncio.Future[Outcome[T]], K] = {
        asyncio.ensure_future(_outcome(call)): key for key, call in calls.items()
    }
    pending: set[asyncio.Future[Outcome[T]]] = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if on_outcome(tasks[task], task.result()):
                    return
    finally:
        for task in pending:
            if not detach:
                task.cancel()
            _background.add(task)
            task.add_done_callback(_background.discard)


async def fan_out_staggered(
    calls: Mapping[K, Callable[[], Awaitable[T]]],
    on_outcome: Callable[[K, Outcome[T]], bool],
    *,
    delay: float,
) -> None:
    """Like :func:`fan_out`, but only the first call starts at once.

    The others start as soon as an outcome arrives that does not settle the question
    (``on_outcome`` returned False), or speculatively after ``delay`` seconds without any
    answer. When the first bookie answers well, it is the only one asked.
    """
    hurry = asyncio.Event()

    async def start(make: Callable[[], Awaitable[T]], wait: float) -> T:
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hurry.wait(), wait)
        return await make()

    def seen(key: K, outcome: Outcome[T]) -> bool:
        hurry.set()
        return on_outcome(key, outcome)

    await fan_out(
        {key: start(make, delay if i else 0.0) for i, (key, make) in enumerate(calls.items())},
        seen,
    )


def _range_read(
    ledger_id: int, first: int, last: int
) -> Callable[[BookieClient], Awaitable[ReadReply]]:
    return lambda client: client.read(ledger_id, first, last)


async def read_entry(
    ctx: LedgerContext, ledger_id: int, entry_id: int, bookies: Sequence[str]
) -> StoredEntry:
    """Read one entry, trying ``bookies`` (its write set) in order.

    Moves to the next bookie on an error, a timeout or "no such entry".

    Raises:
        NoSuchEntryError: every bookie explicitly said it does not have the entry.
        DigestMismatchError: every copy that reached this client failed its digest check
            (each was damaged on a bookie or in transit; none is served).
        BookieUnavailableError: no bookie returned it and some answers were unknown.
        UnauthorizedError: a bookie refused the master key.
    """
    unknown: list[str] = []
    damaged: list[str] = []  # answered with a copy whose digest did not verify
    for bookie in bookies:
        outcome = await _outcome(ask(ctx, bookie, _range_read(ledger_id, entry_id, entry_id)))
        if isinstance(outcome, BookieError):
            unknown.append(bookie)
            continue
        if outcome.status is Status.UNAUTHORIZED:
            raise _unauthorized(ledger_id, bookie)
        if outcome.status is Status.OK and outcome.entries:
            stored = outcome.entries[0]
            if stored.entry_id == entry_id:
                return stored
        if outcome.status is Status.DIGEST_MISMATCH:
            damaged.append(bookie)
        elif outcome.status not in _EXPLICIT_ABSENT and outcome.status is not Status.OK:
            unknown.append(bookie)
    if damaged and not unknown:
        raise DigestMismatchError(
            f"entry {entry_id} of ledger {ledger_id}: the copies of {', '.join(damaged)} "
            "failed their digest check (damaged on the bookie or in transit) and no other "
            "copy could be read; none is served"
        )
    unknown += damaged
    if unknown:
        raise BookieUnavailableError(
            f"entry {entry_id} of ledger {ledger_id}: no bookie returned it and "
            f"{', '.join(unknown)} did not answer"
        )
    raise NoSuchEntryError(
        f"entry {entry_id} of ledger {ledger_id} is on none of {', '.join(bookies)}"
    )


async def read_range(
    ctx: LedgerContext, ledger_id: int, first: int, last: int, bookies: Sequence[str]
) -> list[StoredEntry]:
    """Read ``first..last`` from bookies that each hold every entry of the range.

    Only valid when ``Qw == E`` in the fragment (no striping). Asks the first bookie for the
    rest of the range; a bookie may answer a prefix (size limit, or it missed entries that an
    ack quorum without it acknowledged), and the remainder is asked from the next bookie,
    rotating. Raises like :func:`read_entry` for an entry no bookie can return.
    """
    out: list[StoredEntry] = []
    position = first
    index = 0
    misses = 0
    while position <= last:
        bookie = bookies[index % len(bookies)]
        outcome = await _outcome(ask(ctx, bookie, _range_read(ledger_id, position, last)))
        got: list[StoredEntry] = []
        if not isinstance(outcome, BookieError):
            if outcome.status is Status.UNAUTHORIZED:
                raise _unauthorized(ledger_id, bookie)
            if outcome.status is Status.OK:
                for stored in outcome.entries:
                    if stored.entry_id != position + len(got) or stored.entry_id > last:
                        break
                    got.append(stored)
        if got:
            out.extend(got)
            position += len(got)
            misses = 0
            continue
        misses += 1
        index += 1
        if misses >= len(bookies):
            # Nobody has `position` in a range read: ask entry by entry for the clear error.
            out.append(await read_entry(ctx, ledger_id, position, _rotated(bookies, index)))
            position += 1
            misses = 0
    return out


def _rotated(bookies: Sequence[str], start: int) -> list[str]:
    n = len(bookies)
    return [bookies[(start + i) % n] for i in range(n)]


def write_set_bookies(metadata: LedgerMetadata, entry_id: int) -> list[str]:
    """Bookie ids of the write set of ``entry_id``, in write-set order."""
    ensemble = metadata.ensemble_for(entry_id)
    return [ensemble[i] for i in write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)]


async def read_last_add_confirmed(ctx: LedgerContext, metadata: LedgerMetadata) -> int:
    """Ask every bookie of the last fragment for its LAC; return the highest seen once
    explicit answers cover every write quorum (or all bookies answered).

    Any LAC a bookie reports is a true lower bound (it was confirmed by the writer), so the
    result is safe to read up to; coverage makes it the freshest one an ack quorum knows.

    Raises:
        BookieUnavailableError: no bookie of the last fragment answered.
        UnauthorizedError: a bookie refused the request.
    """
    ensemble = metadata.last_ensemble
    coverage = QuorumCoverage(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
    best = -1
    answered = 0

    def on_outcome(index: int, outcome: Outcome[ReadLacReply]) -> bool:
        nonlocal best, answered
        answer = classify_lac(metadata.ledger_id, ensemble[index], outcome)
        coverage.add(index, answer)
        if answer is Answer.POSITIVE and not isinstance(outcome, BookieError):
            answered += 1
            best = max(best, lac_of(outcome))
        return coverage.covered()

    await fan_out(
        {i: ask(ctx, b, lambda c: c.read_lac(metadata.ledger_id)) for i, b in enumerate(ensemble)},
        on_outcome,
    )
    if answered == 0:
        raise BookieUnavailableError(
            f"ledger {metadata.ledger_id}: no bookie of {', '.join(ensemble)} answered a LAC read"
        )
    return best


__all__ = [
    "EntryProbe",
    "Outcome",
    "ask",
    "classify_fence",
    "classify_lac",
    "fan_out",
    "fan_out_staggered",
    "lac_of",
    "read_entry",
    "read_last_add_confirmed",
    "read_range",
    "write_set_bookies",
]

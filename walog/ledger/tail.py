"""The stored tail of an open ledger, read without fencing (docs/protocol.md, "Read
barrier").

Recovery finds a ledger's last entry with fencing reads, so the writer can add nothing
more. A *read barrier* needs less: an entry at or past every entry the writer acknowledged
before the question was asked, while the writer goes on. The answer is the highest entry
stored by the bookies of the last fragment, asked with the plain LAC read (which also
returns each bookie's last stored entry, and fences nothing), taken once explicit answers
cover every write quorum with ``Qw - Qa + 1`` bookies, the rule recovery's fence uses:

- an entry the writer acknowledged is on ``Qa`` bookies of its write set, so at least one
  of the answering ``Qw - Qa + 1`` holds it, and that bookie's last stored entry is at or
  past it;
- an entry before the last fragment was complete when the fragment began (the writer
  starts a fragment at its first incomplete entry), so ``first entry of the last
  fragment - 1`` bounds every entry of earlier fragments;
- an entry acknowledged in a fragment the metadata does not name yet cannot exist: the
  writer acknowledges no entry before the fragment that holds it is in the metadata (the
  simulator checks this rule, ``ack_unnamed``), so a caller that read the metadata after
  its question started has every fragment that matters.

The tail may lie past the last add confirmed (an entry stored but not acknowledged yet,
which may even be dropped by a later recovery); the caller waits for the LAC to reach it,
or for the ledger to close. :func:`stored_tail` is the I/O; :func:`tail_of` the pure rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from walog.errors import BookieError, BookieUnavailableError, is_retriable
from walog.ledger.context import LedgerContext
from walog.ledger.quorum import Answer, QuorumCoverage
from walog.ledger.readops import Outcome, ask, classify_lac, fan_out, lac_of
from walog.metadata.layout import LedgerMetadata
from walog.transport.base import ReadLacReply, StoredEntry
from walog.wire.status import Status

TAIL_READ_ATTEMPTS = 4
"""Rounds of asking the last fragment before a tail read gives up."""


@dataclasses.dataclass(frozen=True, slots=True)
class StoredTail:
    """The highest entry the answering bookies of a ledger's last fragment store.

    Attributes:
        entry_id: at or past every entry acknowledged before the read began (-1: none).
        entry: that entry as a bookie sent it, when one did (None otherwise, e.g. when the
            tail is the entry before the last fragment).
        lac: the highest last add confirmed the answers showed (a bookie's own, or the one
            its last entry carries): entries up to it are confirmed already, so a caller
            need not wait for them.
    """

    entry_id: int
    entry: StoredEntry | None
    lac: int = -1


def tail_of(metadata: LedgerMetadata, replies: Iterable[ReadLacReply]) -> StoredTail:
    """The tail that covering ``replies`` (explicit LAC answers of the last fragment's
    bookies) prove: the highest last stored entry among them, and never below the entry
    before the last fragment."""
    best = StoredTail(metadata.ensembles[-1][0] - 1, None)
    lac = -1
    for reply in replies:
        if reply.status is not Status.OK:
            continue  # an explicit "nothing stored"
        lac = max(lac, lac_of(reply))
        last = max(reply.last_entry_id, reply.lac)
        if reply.last_entry is not None and reply.last_entry.entry_id >= last:
            candidate = StoredTail(reply.last_entry.entry_id, reply.last_entry)
        else:
            candidate = StoredTail(last, None)
        if candidate.entry_id > best.entry_id or (
            candidate.entry_id == best.entry_id and best.entry is None
        ):
            best = candidate
    return dataclasses.replace(best, lac=lac)


async def stored_tail(ctx: LedgerContext, metadata: LedgerMetadata) -> StoredTail:
    """Ask the bookies of the last fragment of ``metadata`` (read after the question began)
    for their last stored entry, without fencing; return the tail once explicit answers
    cover every write quorum.

    Raises:
        BookieUnavailableError: too few bookies answered to cover every write quorum.
        UnauthorizedError: a bookie refused the request.
    """
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(is_retriable),
        stop=stop_after_attempt(TAIL_READ_ATTEMPTS),
        wait=wait_exponential(multiplier=0.05, max=1.0),
        reraise=True,
    ):
        with attempt:
            return await _stored_tail_once(ctx, metadata)
    raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover


async def _stored_tail_once(ctx: LedgerContext, metadata: LedgerMetadata) -> StoredTail:
    ensemble = metadata.last_ensemble
    coverage = QuorumCoverage(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
    replies: list[ReadLacReply] = []

    def on_outcome(index: int, outcome: Outcome[ReadLacReply]) -> bool:
        answer = classify_lac(metadata.ledger_id, ensemble[index], outcome)
        coverage.add(index, answer)
        if answer is Answer.POSITIVE and not isinstance(outcome, BookieError):
            replies.append(outcome)
        return coverage.covered()

    await fan_out(
        {i: ask(ctx, b, lambda c: c.read_lac(metadata.ledger_id)) for i, b in enumerate(ensemble)},
        on_outcome,
    )
    if not coverage.covered():
        raise BookieUnavailableError(
            f"ledger {metadata.ledger_id}: cannot bound its acknowledged entries, need "
            f"{metadata.write_quorum - metadata.ack_quorum + 1} answers in every write quorum "
            f"of {', '.join(ensemble)}"
        )
    return tail_of(metadata, replies)


__all__ = ["TAIL_READ_ATTEMPTS", "StoredTail", "stored_tail", "tail_of"]

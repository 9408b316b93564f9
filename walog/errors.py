"""One exception hierarchy for walog, rooted at :class:`WalogError`.

Every error a user can see is a subclass of :class:`WalogError`. Classes say *what*
happened, not where. ``retriable`` on the class tells the retry loops (tenacity, one
predicate: :func:`is_retriable`) whether trying the same operation again can succeed.

Foreign exceptions (``grpc.RpcError``, kazoo, sqlite3, ``OSError``) are translated into
these classes at exactly one boundary per dependency, with ``raise ... from exc``.
"""

from __future__ import annotations


class WalogError(Exception):
    """Root of every walog error."""

    retriable: bool = False


class LedgerFencedError(WalogError):
    """The ledger was fenced by a recovering reader; this writer can add no more entries.

    Like a timeout, it does not say whether the failed entry was written: only recovery
    of the ledger decides that.
    """


class WriterFencedError(LedgerFencedError):
    """Another writer took over the log; this log writer can append no more records."""


class LedgerClosedError(WalogError):
    """The ledger is closed; nothing more can be appended to it."""


class NotEnoughBookiesError(WalogError):
    """Fewer bookies are available than the ensemble (or a replacement) needs."""

    retriable = True


class RecordTooLargeError(WalogError, ValueError):
    """A record or entry is larger than a limit allows: the log's ``max_entry_bytes``, the
    client's, or a bookie's (``--max-entry-bytes``, when the bookie refused the entry). The
    message names the size and the limit; nothing of it was stored, and the writer goes on
    with the next appends. A ``ValueError`` too, as bad input is.

    Attributes:
        size: the bytes that were too many (a record's payload, or an entry's).
        limit: the limit they exceed, or None when it is not known.
    """

    def __init__(self, message: str, *, size: int = 0, limit: int | None = None) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class SequenceError(WalogError, ValueError):
    """A producer session's seq that cannot be appended: it was skipped (seqs only
    increase), or is given without a producer. Nothing was written; the writer goes on
    (docs/logs.md, "Producer sessions")."""


class SequenceTooOldError(SequenceError):
    """A producer's seq older than the window of recent seqs whose positions the log keeps:
    whether it is in the log cannot be told, so it is not written again."""


class NoSuchLedgerError(WalogError):
    """The ledger does not exist (never created, or deleted)."""


class NoSuchEntryError(WalogError):
    """The entry does not exist, or lies beyond what may be read (the last add confirmed)."""


class NoSuchLogError(WalogError):
    """The log does not exist."""


class MetadataConflictError(WalogError):
    """A compare-and-swap on the metadata store lost: someone else changed the record."""

    retriable = True


class UnauthorizedError(WalogError):
    """The ledger password (master key) or the client's credentials were refused."""


class BookieError(WalogError):
    """A bookie failed a request (I/O error, unavailable, timed out, overloaded)."""

    retriable = True


class BookieUnavailableError(BookieError):
    """A bookie could not be reached or did not answer in time."""


class BookieCallUnsupportedError(BookieError):
    """The bookie does not know the call (it runs an older version): the caller falls back
    to calls it does know."""

    retriable = False


class BookieReadOnlyError(BookieError):
    """The bookie is in read-only mode and accepts no writes."""


class BookieRestartedError(BookieError):
    """A bookie restarted while it held VOLATILE entries it had acknowledged but not synced
    (a restart loses them), so the ledger's writer stopped before acknowledging anything
    later. Recovering the ledger closes it at what its bookies still hold."""

    retriable = False


class DigestMismatchError(WalogError):
    """An entry's digest does not match its contents: it is corrupt and is never served."""


class MetadataError(WalogError):
    """The metadata store failed (connection lost, session expired, I/O error)."""

    retriable = True


class SessionExpiredError(MetadataError):
    """The metadata session expired (ZooKeeper: no contact with the ensemble for longer than
    the session timeout): what it held for this process (a log's leadership, registrations)
    may be someone else's by now."""

    retriable = False


class DataLossError(WalogError):
    """Requested records are gone (for example truncated) and cannot be read."""


class NewerFormatError(WalogError, ValueError):
    """A record, file or message carries a newer format version than this walog reads; the
    message names both versions and what to upgrade (docs/compatibility.md)."""


class CookieMismatchError(WalogError):
    """A bookie's data directory does not match its cookie in the metadata store."""


def is_retriable(exc: BaseException) -> bool:
    """Return True when retrying the failed operation may succeed (tenacity predicate)."""
    return isinstance(exc, WalogError) and exc.retriable


__all__ = [
    "BookieCallUnsupportedError",
    "BookieError",
    "BookieReadOnlyError",
    "BookieRestartedError",
    "BookieUnavailableError",
    "CookieMismatchError",
    "DataLossError",
    "DigestMismatchError",
    "LedgerClosedError",
    "LedgerFencedError",
    "MetadataConflictError",
    "MetadataError",
    "NewerFormatError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NoSuchLogError",
    "NotEnoughBookiesError",
    "RecordTooLargeError",
    "SequenceError",
    "SequenceTooOldError",
    "SessionExpiredError",
    "UnauthorizedError",
    "WalogError",
    "WriterFencedError",
    "is_retriable",
]

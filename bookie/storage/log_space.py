"""What each entry log holds live, and which logs compaction may take.

The logs table of the index keeps, per entry log, the bytes written (``_total``) and the
bytes of each ledger's entries still indexed there. :class:`LogSpace` reads that
accounting (the writer thread's copy, updated after each index commit) for compaction
(bookie/storage/compaction.py): the live share of every log, the bytes a compaction of
one would copy, and sealing the log being filled when most of it died.
"""

from __future__ import annotations

import structlog

from bookie.storage.entry_log_writer import EntryLogWriter

_log = structlog.get_logger(__name__)


def live_of(doc: dict[str, int]) -> int:
    """The live bytes an entry log's accounting row counts (every ledger's, not ``_total``)."""
    return sum(size for name, size in doc.items() if name != "_total")


class LogSpace:
    """The live accounting of the entry logs (``docs``: log id -> accounting row, the
    dict the storage updates in place) beside the writer filling one of them."""

    def __init__(self, docs: dict[int, dict[str, int]], writer: EntryLogWriter) -> None:
        self.docs = docs
        self._writer = writer

    def live_shares(self) -> dict[int, float]:
        """The live share (bytes of entries still indexed / bytes written) of every entry
        log but the one being filled."""
        shares: dict[int, float] = {}
        for log_id, doc in self.docs.items():
            total = doc.get("_total", 0)
            if log_id != self._writer.log_id and total:
                shares[log_id] = live_of(doc) / total
        return shares

    def seal_filling_log(self, threshold: float) -> int | None:
        """Stop appending to the entry log being filled when its live share is below
        ``threshold`` (deleted ledgers left most of it dead): the next write starts a new
        log and this one may be compacted like any other. Returns its id, or None when it
        was left as it is. A disk under pressure needs it: the log being filled is never
        compacted, and on a disk smaller than ``entry_log_file_bytes`` it may hold every
        entry there is."""
        log_id = self._writer.log_id
        doc = self.docs.get(log_id)
        if log_id < 0 or doc is None or not doc.get("_total", 0):
            return None
        if live_of(doc) / doc["_total"] >= threshold:
            return None
        self._writer.stop_appending()
        _log.info("entry log being filled sealed for compaction", log=log_id)
        return log_id

    def live_bytes(self, log_id: int) -> int:
        """Bytes of the entries of entry log ``log_id`` still indexed (0: no such log):
        what compacting it copies."""
        return live_of(self.docs.get(log_id, {}))


__all__ = ["LogSpace", "live_of"]

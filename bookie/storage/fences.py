"""A bookie's fences in flight, and the ledgers it deleted (fenced for good).

A fence is answered only once its FENCE record is synced: the first fence of a ledger
queues that record, and every fence arriving before the sync waits for the same record
(docs/protocol.md, "Fencing"). A ledger this bookie deleted stays fenced for good
(bookie/storage/tombstones.py): a plain add to it is refused, a fence or a recovery write
recreates it fenced.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable

from bookie.storage.journal import GroupReport, Journal
from bookie.storage.journal_files import StorageIOError
from bookie.storage.journal_records import fence_record
from bookie.storage.ledger_state import LedgerState
from bookie.storage.tombstones import Tombstones
from walog import mutations


class Fences:
    """The FENCE records queued and not synced yet, and the deleted ledgers.

    Args:
        journal: where FENCE records go.
        touched: called with a ledger whose state changed (the checkpoint stores it).
    """

    def __init__(self, journal: Journal, touched: Callable[[int], object]) -> None:
        self._journal = journal
        self._touched = touched
        # A fenced ledger absent from here is durably fenced (its record synced, or
        # replayed from disk on open).
        self._pending: dict[int, asyncio.Future[GroupReport]] = {}
        self.tombstones = Tombstones()
        """The ledgers deleted here (a checkpoint stores a copy with its mark)."""

    def is_deleted(self, ledger_id: int) -> bool:
        """Whether the ledger was deleted here (and so stays fenced)."""
        return ledger_id in self.tombstones and not mutations.enabled(
            "deleted_ledger_forgets_fence"
        )

    def fence(self, state: LedgerState) -> None:
        """Queue the FENCE record and fence now (plain adds are refused from here on);
        :meth:`synced` waits until the record is on disk.

        The ledger is marked fenced only once its record is queued: a queueing that raises
        leaves it unfenced, so no later fence can be answered on a mark that no record
        backs.
        """
        ledger_id = state.ledger_id
        record = self._journal.append((fence_record(ledger_id),), sync=True)
        assert record is not None
        state.fenced = True
        self._touched(ledger_id)
        self._pending[ledger_id] = record
        record.add_done_callback(functools.partial(self._synced, ledger_id))

    async def synced(self, ledger_id: int) -> bool:
        """Wait until the ledger's fence is on disk; False if its sync failed."""
        waiter = self._pending.get(ledger_id)
        if waiter is None:
            return True
        try:
            # Shared by every fence of the ledger: one cancelled request must not cancel
            # the others' wait.
            await asyncio.shield(waiter)
        except StorageIOError:
            return False
        return True

    def _synced(self, ledger_id: int, waiter: asyncio.Future[GroupReport]) -> None:
        # Only a synced record makes the ledger durably fenced. After a failed sync the
        # future stays here, so a later fence of this ledger waits on it and fails too
        # (the journal has failed: nothing can be persisted any more).
        synced = not waiter.cancelled() and waiter.exception() is None
        if synced and self._pending.get(ledger_id) is waiter:
            del self._pending[ledger_id]

    def deleted(self, ledger_ids: Iterable[int]) -> None:
        """The ledgers are being deleted: fenced for good from now on (before their state
        is gone, so that no add slips in between); a recreated one is fenced anew."""
        ids = list(ledger_ids)
        self.tombstones.add_all(ids)
        for ledger_id in ids:
            self._pending.pop(ledger_id, None)


__all__ = ["Fences"]

"""The sync ledger API: :class:`LedgerWriter` and :class:`LedgerReader`.

Each wraps its ``walog.ledger`` coroutine counterpart and runs it on the client's event loop
thread (:class:`walog._loop_thread.LoopThread`). Appends do not hop threads one by one:
:meth:`LedgerWriter.append_async` puts the entry on a queue that the loop drains in batches
(one wake-up per batch), and the writer resolves the callers' futures itself, in batches
too.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from walog._loop_thread import Handoff, LoopThread, SyncContext
from walog.ledger.entry import Entry
from walog.ledger.reader import AsyncLedgerReader
from walog.ledger.writer import AsyncLedgerWriter, as_payload
from walog.metadata.layout import LedgerMetadata

T = TypeVar("T")


class LedgerWriter(SyncContext):
    """Appends to a ledger this client created (a context manager: ``close()`` on exit).

    Attributes:
        async_writer: the underlying :class:`walog.aio.AsyncLedgerWriter`.
    """

    def __init__(self, writer: AsyncLedgerWriter, loop: LoopThread, max_entry_bytes: int) -> None:
        self.async_writer = writer
        self._loop = loop
        self._max_entry_bytes = max_entry_bytes
        # The async writer resolves each future itself when its entry completes: no asyncio
        # future, callback or thread hop per entry.
        self._handoff: Handoff[int] = Handoff(loop, writer.append_into)

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self.async_writer.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id confirmed (-1 before the first ack)."""
        return self.async_writer.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger's metadata as the writer last knew it."""
        return self.async_writer.metadata

    def append_async(self, data: bytes | bytearray | memoryview) -> concurrent.futures.Future[int]:
        """Queue an append; the future resolves with the entry id once it is confirmed.

        Raises:
            TypeError: ``data`` is a ``str`` or not bytes-like.
            ValueError: the entry exceeds the configured maximum (no id is taken).
        """
        payload = as_payload(data, self._max_entry_bytes)
        return self._handoff.put(payload)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append one entry; return its id once it and every lower entry are confirmed."""
        return self.append_async(data).result()

    def append_many_async(
        self, entries: Iterable[bytes | bytearray | memoryview]
    ) -> concurrent.futures.Future[list[int]]:
        """Queue appends of ``entries``, in order, with one future for all of them: it
        resolves with their entry ids once every one is confirmed, or fails with the first
        failure (entries before the failed one may be confirmed, as with
        :meth:`append_async`). One hand-over to the event loop for the whole batch.

        Raises:
            TypeError: an entry is a ``str`` or not bytes-like (nothing is appended).
            ValueError: an entry exceeds the configured maximum (nothing is appended).
        """
        limit = self._max_entry_bytes
        return self._handoff.put_many([as_payload(data, limit) for data in entries])

    def append_many(self, entries: Iterable[bytes | bytearray | memoryview]) -> list[int]:
        """Append ``entries`` in order; return their ids once every one is confirmed."""
        return self.append_many_async(entries).result()

    def force(self) -> int:
        """Make every entry appended so far durable; return the last synced entry id."""
        return self._loop.run(self._after_drain(self.async_writer.force))

    def close(self) -> None:
        """Wait for outstanding appends, then close the ledger (CAS to CLOSED)."""
        self._loop.run(self._after_drain(self.async_writer.close))

    async def _after_drain(self, step: Callable[[], Awaitable[T]]) -> T:
        self._handoff.drain()  # appends queued before this call go first
        return await step()


class LedgerReader(SyncContext):
    """Reads a ledger (a context manager: ``close()`` on exit).

    Attributes:
        async_reader: the underlying :class:`walog.aio.AsyncLedgerReader`.
    """

    def __init__(self, reader: AsyncLedgerReader, loop: LoopThread) -> None:
        self.async_reader = reader
        self._loop = loop

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self.async_reader.ledger_id

    @property
    def is_closed(self) -> bool:
        """True when the ledger is known to be CLOSED."""
        return self.async_reader.is_closed

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry known confirmed (for a closed ledger: its last entry)."""
        return self.async_reader.last_add_confirmed

    def read(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last``; NoSuchEntryError past the last add confirmed."""
        return self._loop.run(self.async_reader.read(first, last))

    def read_unconfirmed(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last``, possibly past the last add confirmed."""
        return self._loop.run(self.async_reader.read_unconfirmed(first, last))

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the last add confirmed."""
        return self._loop.run(self.async_reader.read_last_add_confirmed())

    def wait_last_add_confirmed(self, after: int, timeout: float) -> int:
        """Wait until the LAC exceeds ``after`` or ``timeout`` seconds pass; return the LAC."""
        return self._loop.run(self.async_reader.wait_last_add_confirmed(after, timeout))

    def close(self) -> None:
        """Release the reader."""
        self._loop.run(self.async_reader.close())


__all__ = ["LedgerReader", "LedgerWriter"]

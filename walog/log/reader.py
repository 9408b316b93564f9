"""The tailing log reader: never fences, follows the ledger list, survives writer changes.

A reader opens every ledger without recovery (docs/protocol.md, "Opening without
recovery"), so it never disturbs a writer. Closed ledgers are read to their last entry; the
open one is read up to its last add confirmed and tailed with LAC long polls, which also end
when the ledger gets closed (by its writer on a roll, or by a new writer's recovery: the
ledger reader watches the ledger's metadata). The reader watches the log's metadata record
(new ledgers, truncation) and looks again on every change, so nothing is polled in a loop.
When the ledger it stands in gets closed it reads on to the closed end, then moves to the
next ledger of the list.

Ledgers that were archived and then truncated are read from the archive's files first
(walog.log.archived), with the same positions, when the start is before the first listed
ledger. A position neither the bookies nor the archive hold raises
:class:`walog.DataLossError`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Sequence
from typing import Literal

from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_random_exponential

from walog._loggers import get_logger
from walog.errors import DataLossError, NoSuchEntryError, NoSuchLedgerError, is_retriable
from walog.ledger.entry import Entry
from walog.log.archived import ArchivedLedger, archive_covers, archived_entries, archived_only
from walog.log.lag import ReaderLag, measure_lag
from walog.log.ledgers import LedgerClientLike, LedgerReaderLike
from walog.log.log_metadata import LogMetadata, commit_cursor, read_log
from walog.log.position import Position, Record, ledger_start, position_argument, unchecked_position
from walog.log.records import is_tagged, iter_records, iter_tagged_views
from walog.log.subscriptions import validate_subscription_name
from walog.metadata.layout import log_path

log = get_logger(__name__)

StartAt = Literal["earliest", "latest"] | Position
ORIGIN = Position(0, 0, 0)
LONG_POLL_SECONDS = 10.0
"""Longest single LAC long poll; a metadata change interrupts it earlier."""
READ_BATCH_ENTRIES = 64
"""Entries fetched per read request while catching up."""
RETRY_SECONDS = 60.0
"""How long retriable failures (bookies down, metadata hiccups) are retried per step."""


def _retrying() -> AsyncRetrying:
    return AsyncRetrying(
        retry=retry_if_exception(is_retriable),
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
        stop=stop_after_delay(RETRY_SECONDS),
        reraise=True,
    )


class AsyncLogReader:
    """Reads a log's records in order, tailing it. Made by :func:`open_log_reader`."""

    def __init__(
        self,
        client: LedgerClientLike,
        name: str,
        meta: LogMetadata,
        password: bytes,
        subscription: str | None = None,
    ) -> None:
        self._client = client
        self._store = client.ctx.store
        self.name = name
        self.subscription = subscription
        """The subscription this reader reads for (walog.log.subscriptions), or None."""
        self._meta = meta
        self._password = password
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._buffer: collections.deque[Record] = collections.deque()
        self._ledger_id: int | None = None
        self._next_entry = 0
        self._skip: Position | None = None
        self._handle: LedgerReaderLike | None = None
        self._bound = -1  # highest readable entry of the current ledger
        self._stale = False
        self._closed = False
        self._tail_wait: asyncio.Task[int] | None = None
        # Ledgers only the archive holds, read before the listed ones; records before
        # _archive_skip are dropped.
        self._archived: collections.deque[ArchivedLedger] = collections.deque()
        self._archive_skip: Position | None = None
        self._unwatch_log = self._store.watch(log_path(name), self._notify)

    # -- public ----------------------------------------------------------------------------

    @property
    def position(self) -> Position | None:
        """The position of the next record this reader returns, when known."""
        if self._buffer:
            return self._buffer[0].position
        if self._archived:
            return max(ledger_start(self._archived[0].ledger_id), self._archive_skip or ORIGIN)
        if self._ledger_id is None:
            return None
        here = Position(self._ledger_id, self._next_entry, 0)
        return here if self._skip is None or self._skip < here else self._skip

    async def commit(self, position: Position | str | None = None) -> Position | None:
        """Record in the log that this reader's subscription consumed every record before
        ``position`` (default: before the next record this reader returns, i.e. every
        record it returned); return the position committed, None when there is nothing
        to commit yet (an empty log). Retention keeps what the subscription has not passed.

        Raises:
            ValueError: the reader was not opened for a subscription, or ``position`` is
                text that is not a position.
            TypeError: ``position`` is neither a Position nor text.
        """
        if self.subscription is None:
            raise ValueError(
                f"log reader of {self.name!r} has no subscription to commit: open it with "
                "open_reader(subscription=NAME)"
            )
        target = self.position if position is None else position_argument(position, "position")
        if target is None:
            return None
        await commit_cursor(self._store, self.name, self.subscription, target)
        return target

    async def lag(self) -> ReaderLag:
        """How far this reader trails the log's end as the bookies confirm it now (reads
        the log's record and the LAC of its open ledger): what a warm standby checks
        before it takes over."""
        return await self.lag_from(self.position)

    async def lag_from(self, position: Position | None) -> ReaderLag:
        """:meth:`lag` measured from ``position`` (a facade that buffers records hands in
        the position of the next one it returns)."""
        return await measure_lag(self._client, self.name, position, self._password)

    async def read_next(self, timeout: float | None = None) -> Record | None:  # noqa: ASYNC109
        """The next record; waits for one while tailing. None when ``timeout`` passes.

        Raises:
            DataLossError: the next record was truncated.
            NoSuchLogError: the log was deleted.
        """
        if self._closed:
            raise RuntimeError("log reader is closed")
        deadline = None if timeout is None else self._loop.time() + timeout
        while not self._buffer:
            if self._closed:  # close() ended this read's wait
                raise RuntimeError("log reader is closed")
            if self._archived:
                await self._read_archived()
            elif not await self._step(deadline):
                return None
        return self._buffer.popleft()

    async def read_available(self, timeout: float | None = None) -> list[Record]:  # noqa: ASYNC109
        """Wait like :meth:`read_next` for one record, then return it together with every
        record already fetched ([] on timeout). Lets callers take records in batches."""
        first = await self.read_next(timeout)
        if first is None:
            return []
        out = [first, *self._buffer]
        self._buffer.clear()
        return out

    def __aiter__(self) -> AsyncLogReader:
        return self

    async def __anext__(self) -> Record:
        record = await self.read_next()
        assert record is not None  # no timeout: it waits
        return record

    async def __aenter__(self) -> AsyncLogReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop watching metadata. Idempotent. A read waiting for records raises
        RuntimeError, as reads after close() do."""
        if self._closed:
            return
        self._closed = True
        self._unwatch_log()
        self._on_change()  # wakes a waiting read, which then finds the reader closed
        await self._release()

    # -- positioning -----------------------------------------------------------------------

    async def _seek(self, start: StartAt) -> None:
        if start != "latest" and await self._seek_archive(start):
            return
        if isinstance(start, Position):
            self._check_not_truncated(start)
            await self._enter(start.ledger_id, start.entry_id)
            self._skip = start
        elif not self._meta.ledgers:
            pass  # empty log: the first ledger that appears is where reading starts
        elif start == "earliest":
            await self._enter(self._meta.ledgers[0].ledger_id, 0)
        else:
            await self._seek_latest()

    async def _seek_latest(self) -> None:
        # After the last add confirmed the bookies know of: like any non-recovery reader,
        # that can trail the writer by the entries whose LAC it has not sent yet.
        last = self._meta.ledgers[-1]
        if last.is_closed:
            await self._enter(last.ledger_id, last.last_entry_id + 1)
            return
        await self._enter(last.ledger_id, 0)
        await self._open_current()
        self._next_entry = self._bound + 1

    async def _seek_archive(self, start: Position | Literal["earliest"]) -> bool:
        """Start in the archive when ``start`` was truncated and the archive holds it."""
        gone = self._meta.truncated_through
        if gone is None or (isinstance(start, Position) and start >= gone):
            return False
        if not archive_covers(self._meta):
            return False  # records between the archive and the bookies are lost
        archived = await asyncio.to_thread(archived_only, self._meta)
        if not archived:
            return False
        if isinstance(start, Position):
            if start < ledger_start(archived[0].ledger_id):
                return False  # before the archive too: lost
            archived = [a for a in archived if a.end > start]
            self._archive_skip = start
        self._archived.extend(archived)
        if self._meta.ledgers:
            await self._enter(self._meta.ledgers[0].ledger_id, 0)
        return True

    async def _read_archived(self) -> None:
        """Buffer the records of the next ledger only the archive holds."""
        ledger = self._archived.popleft()
        location = self._meta.archive_location
        assert location is not None
        entries = await asyncio.to_thread(
            archived_entries, location, ledger.ledger_id, 0, ledger.last_entry_id
        )
        skip = self._archive_skip
        for entry in entries:
            for slot, (timestamp, data) in enumerate(iter_records(entry.data)):
                position = Position(entry.ledger_id, entry.entry_id, slot)
                if skip is None or position >= skip:
                    self._buffer.append(Record(position, data, timestamp))

    def _check_not_truncated(self, position: Position) -> None:
        gone = self._meta.truncated_through
        if gone is not None and position < gone:
            # ``gone`` is one past the last truncated record: name the first that exists.
            raise DataLossError(
                f"log {self.name!r}: position {position} was truncated; the log now starts "
                f"at {self._meta.existing_at_or_after(gone)} (open the reader at 'earliest')"
            )

    async def _release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            await handle.close()

    async def _enter(self, ledger_id: int, entry_id: int) -> None:
        if ledger_id != self._ledger_id:
            await self._release()
            self._bound = -1
        self._ledger_id = ledger_id
        self._next_entry = entry_id
        self._skip = None

    def _notify(self) -> None:
        # Called by the store on any thread.
        with contextlib.suppress(RuntimeError):  # loop already closed: nobody waits
            self._loop.call_soon_threadsafe(self._on_change)

    def _on_change(self) -> None:
        self._changed.set()
        if self._tail_wait is not None:
            self._tail_wait.cancel()  # a tailing reader looks at the new list at once

    # -- the reading state machine ---------------------------------------------------------

    async def _step(self, deadline: float | None) -> bool:
        """Make one move towards a buffered record; False once ``deadline`` passed."""
        if self._changed.is_set():
            self._changed.clear()
            try:
                await self._reread_list()
            except BaseException:
                # The change was not looked at (the caller cancelled, the read failed):
                # no notification comes again for it, so the next step re-reads.
                self._changed.set()
                raise
            if self._handle is not None and not self._handle.is_closed:
                # The list changes when the ledger's writer rolls (it closes the ledger
                # next and records that) or a new writer took over (after recovery closed
                # it): a fresh open sees the ledger's end without relying on the handle
                # having noticed the close.
                self._stale = True
        if self._ledger_id is None:
            if self._meta.ledgers:
                await self._enter(self._meta.ledgers[0].ledger_id, 0)
                return True
            return await self._wait(deadline, tail=False)
        if self._meta.index_of(self._ledger_id) is None:
            return await self._leave_unlisted(deadline)
        if self._handle is None or self._stale:
            await self._open_current()
            return True
        if self._next_entry <= self._bound:
            await self._read_batch()
            return True
        if self._handle.is_closed:
            if self._handle.last_add_confirmed > self._bound:
                # The ledger was closed while we read it: its end may lie past our bound.
                self._bound = self._handle.last_add_confirmed
                return True
            successor = self._successor(self._ledger_id)
            if successor is not None:
                await self._enter(successor, 0)
                return True
            return await self._wait(deadline, tail=False)
        return await self._wait(deadline, tail=True)

    async def _reread_list(self) -> None:
        """Read the log's metadata again, retrying retriable failures like any read."""
        async for attempt in _retrying():
            with attempt:
                self._meta, _ = await read_log(self._store, self.name)

    def _successor(self, ledger_id: int) -> int | None:
        for info in self._meta.ledgers:
            if info.ledger_id > ledger_id:
                return info.ledger_id
        return None

    async def _leave_unlisted(self, deadline: float | None) -> bool:
        """The current ledger is not (or no longer) in the list: truncated, or a position
        between ledgers. Move on if nothing unread is lost, else raise DataLossError."""
        assert self._ledger_id is not None
        # Checked even when this ledger was read to its end: the ledgers between it and the
        # next listed one left the list too, and truncated_through is past them when they
        # were truncated, so moving on would skip their records.
        self._check_not_truncated(Position(self._ledger_id, self._next_entry, 0))
        successor = self._successor(self._ledger_id)
        if successor is None:
            return await self._wait(deadline, tail=False)
        await self._enter(successor, 0)
        return True

    async def _open_current(self) -> None:
        assert self._ledger_id is not None
        ledger_id = self._ledger_id
        await self._release()
        try:
            async for attempt in _retrying():
                with attempt:
                    handle = await self._client.open_ledger(
                        ledger_id, recovery=False, password=self._password
                    )
                    bound = handle.last_add_confirmed
                    if not handle.is_closed:
                        bound = max(bound, await handle.read_last_add_confirmed())
        except NoSuchLedgerError:
            await self._lost_ledger()
            return
        self._handle, self._stale = handle, False
        # What this handle knows, even below what an earlier handle of the ledger saw: the
        # handle reads nothing past its own last add confirmed, so a higher bound kept from
        # before would fail the read as a lost ledger. The entries between are waited for
        # again (the handle's LAC catches up).
        self._bound = bound

    async def _read_batch(self) -> None:
        assert self._handle is not None and self._ledger_id is not None
        first = self._next_entry
        last = min(self._bound, first + READ_BATCH_ENTRIES - 1)
        handle = self._handle
        entries: Sequence[Entry] = ()
        try:
            try:
                entries = await handle.read(first, last)
            except Exception as exc:
                if not is_retriable(exc):
                    raise
                async for attempt in _retrying():
                    with attempt:
                        entries = await handle.read(first, last)
        except (NoSuchLedgerError, NoSuchEntryError):
            await self._lost_ledger()
            return
        for entry in entries:
            if is_tagged(entry.data):
                self._buffer_tagged(entry)
                continue
            # The ids are the ledger's and the slots enumerate's: valid by construction.
            for slot, (timestamp, data) in enumerate(iter_records(entry.data)):
                position = unchecked_position(entry.ledger_id, entry.entry_id, slot)
                if self._skip is not None and position < self._skip:
                    continue
                self._buffer.append(Record(position, data, timestamp))
            self._next_entry = entry.entry_id + 1
        self._skip = None

    def _buffer_tagged(self, entry: Entry) -> None:
        """Buffer the records of a format-2 entry, with their producers and seqs."""
        for slot, (timestamp, data, tag) in enumerate(iter_tagged_views(entry.data)):
            position = unchecked_position(entry.ledger_id, entry.entry_id, slot)
            if self._skip is not None and position < self._skip:
                continue
            producer, seq = tag if tag is not None else (None, None)
            self._buffer.append(Record(position, bytes(data), timestamp, producer, seq))
        self._next_entry = entry.entry_id + 1

    async def _lost_ledger(self) -> None:
        """The current ledger cannot be read any more: see whether truncation took it."""
        assert self._ledger_id is not None
        await self._reread_list()
        if self._meta.index_of(self._ledger_id) is not None:
            raise DataLossError(
                f"log {self.name!r}: ledger {self._ledger_id} of the list cannot be read "
                f"at entry {self._next_entry}"
            )
        self._check_not_truncated(Position(self._ledger_id, self._next_entry, 0))
        self._stale = False
        await self._release()

    async def _wait(self, deadline: float | None, *, tail: bool) -> bool:
        """Wait for a metadata change (and, when tailing, for the LAC to pass the bound)."""
        remaining = None if deadline is None else deadline - self._loop.time()
        if remaining is not None and remaining <= 0:
            return False
        if not tail:
            changed = self._loop.create_task(self._changed.wait())
            try:
                await asyncio.wait((changed,), timeout=remaining)
            finally:
                changed.cancel()
            return True
        assert self._handle is not None
        poll = LONG_POLL_SECONDS if remaining is None else min(remaining, LONG_POLL_SECONDS)
        # One task, cancelled by a change of the log's metadata (see _on_change).
        waiter = self._loop.create_task(self._handle.wait_last_add_confirmed(self._bound, poll))
        self._tail_wait = waiter
        try:
            lac = await waiter
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the caller is cancelled, not just the wait
            return True  # the log changed: look at it again
        except NoSuchLedgerError:
            await self._lost_ledger()
            return True
        except Exception as exc:
            if not is_retriable(exc):
                raise
            log.info("LAC long poll failed; retrying", log=self.name, error=str(exc))
            self._stale = True
            return True
        finally:
            self._tail_wait = None
        self._bound = max(self._bound, lac)
        return True


async def open_log_reader(
    client: LedgerClientLike,
    name: str,
    start: StartAt = "earliest",
    *,
    password: bytes = b"",
    subscription: str | None = None,
) -> AsyncLogReader:
    """Open a tailing reader on log ``name`` at ``start``; for ``subscription``, at its
    committed position instead once it has one.

    Raises:
        NoSuchLogError: the log does not exist.
        DataLossError: ``start`` (or the subscription's position) was truncated.
        ValueError: ``start`` is not "earliest", "latest" or a Position; a bad
            subscription name.
    """
    if not (start in ("earliest", "latest") or isinstance(start, Position)):
        raise ValueError(f"start must be 'earliest', 'latest' or a Position, got {start!r}")
    if subscription is not None:
        validate_subscription_name(subscription)
    meta, _ = await read_log(client.ctx.store, name)
    if subscription is not None and subscription in meta.cursors:
        start = meta.cursors[subscription]
    reader = AsyncLogReader(client, name, meta, password, subscription)
    try:
        await reader._seek(start)
    except BaseException:
        await reader.close()
        raise
    return reader


__all__ = ["AsyncLogReader", "StartAt", "open_log_reader"]

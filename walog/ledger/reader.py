"""Reading a ledger: bounded reads, unconfirmed reads, LAC reads and LAC long polls.

A reader never fences (docs/protocol.md, "Opening without recovery"): opened without
recovery it can tail a ledger that a writer is still appending to, but it may read only up
to the last add confirmed (LAC), because only entries up to the LAC are known to be on an
ack quorum and so readable by every reader forever. A CLOSED ledger is read up to the last
entry in its metadata and never beyond.

Each entry is read from its write set, one bookie after another: an error, a timeout or "no
such entry" moves on to the next bookie. When every bookie of a fragment holds every entry
(``Qw == E``) ranges are read in one request per bookie; with striping, entry by entry.

Tailing (:meth:`AsyncLedgerReader.wait_last_add_confirmed`) follows standing LAC watches
(walog/ledger/lacwatch.py) on bookies of the next entry's write set, combined with a
watch on the ledger's metadata so the reader follows ensemble changes and notices the close.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import TracebackType

from walog.errors import BookieError, BookieUnavailableError, NoSuchEntryError
from walog.ledger import readops
from walog.ledger.context import LedgerContext
from walog.ledger.entry import Entry
from walog.ledger.lacwatch import WATCH_HEARTBEAT_S, LacWatch
from walog.ledger.readops import read_entry, read_range, write_set_bookies
from walog.ledger.recovery import recovery_start
from walog.ledger.tail import StoredTail, stored_tail
from walog.metadata.layout import LedgerMetadata, ledger_path
from walog.transport.base import ReadReply, StoredEntry

MAX_CONCURRENT_ENTRY_READS = 32
"""Single-entry reads in flight at once for one striped range read."""
LONG_POLL_PREFETCH = 64
"""Entries a LAC watch answer brings along at most (when one bookie holds them all), so
tailers need no second round trip for what the answer already brought."""
_PREFETCH_KEPT = 4 * LONG_POLL_PREFETCH
"""At most this many entries brought by the LAC watch are kept for a reader that lags."""


def _check_range(first: int, last: int) -> None:
    if first < 0 or last < first:
        raise ValueError(f"invalid entry range {first}..{last}: need 0 <= first <= last")


LAC_RECHECK_S = WATCH_HEARTBEAT_S
"""A reader waiting this long without news of the LAC asks the ledger's bookies for it (the
watched ones may have forgotten an explicit LAC in a restart while the writer is idle)."""


class AsyncLedgerReader:
    """Reads one ledger without fencing it.

    Args:
        ctx: the client's metadata store, bookie pool and settings.
        metadata: the ledger's metadata as read at open (after recovery: the CLOSED one).
        version: the version of ``metadata`` in the store.
        master_key: the ledger's master key (from its password).
    """

    def __init__(
        self, ctx: LedgerContext, metadata: LedgerMetadata, version: int, master_key: bytes
    ) -> None:
        self._ctx = ctx
        self._md = metadata
        self._version = version
        self._key = master_key
        # Before asking any bookie, what the metadata proves: a closed ledger ends at its last
        # entry; an open one has every entry before its last fragment confirmed.
        self._lac = metadata.last_entry_id if metadata.is_closed else recovery_start(metadata, -1)
        self._md_changed = asyncio.Event()
        self._unwatch: Callable[[], None] | None = None
        self._released = False
        # Confirmed entries the LAC watch brought along, by entry id, until read.
        self._prefetched: dict[int, StoredEntry] = {}
        self._told_by: str | None = None  # the bookie that reported the LAC last
        self._news_at = asyncio.get_running_loop().time()  # when the LAC last moved
        self._lac_watch = LacWatch(ctx.pool, metadata.ledger_id, self._watch_target, self._take_lac)

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self._md.ledger_id

    @property
    def is_closed(self) -> bool:
        """True when the ledger is known to be CLOSED."""
        return self._md.is_closed

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry known to be confirmed (for a closed ledger: its last entry)."""
        return self._lac

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger metadata this reader currently follows."""
        return self._md

    async def read(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` (inclusive), all at or below the last add confirmed.

        On an open ledger, a range past the known LAC first asks the bookies for a fresher
        LAC.

        Raises:
            ValueError: ``first < 0`` or ``last < first``.
            NoSuchEntryError: ``last`` lies past the last add confirmed (or the last entry of
                a closed ledger).
            BookieUnavailableError: no bookie of some entry's write set could serve it.
        """
        self._check_usable()
        _check_range(first, last)
        await self._refresh_if_changed()
        if last > self._lac and not self.is_closed:
            await self.read_last_add_confirmed()
        if last > self._lac:
            raise NoSuchEntryError(
                f"ledger {self.ledger_id}: cannot read up to entry {last}, the last add "
                f"confirmed is {self._lac}"
                + (" and the ledger is closed" if self.is_closed else "")
            )
        return await self._read(first, last)

    async def read_unconfirmed(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last``, possibly past the last add confirmed.

        Entries past the LAC may not be on an ack quorum yet (and may never be); the
        application decides what to do with them. The result stops before the
        first entry past the LAC that no bookie returns. A closed ledger is still read
        only up to its last entry.

        Raises:
            ValueError: ``first < 0`` or ``last < first``.
            NoSuchEntryError: not even ``first`` can be read.
        """
        self._check_usable()
        _check_range(first, last)
        await self._refresh_if_changed()
        if self.is_closed:
            if first > self._lac:
                raise NoSuchEntryError(
                    f"ledger {self.ledger_id} is closed at entry {self._lac}; "
                    f"entry {first} does not exist"
                )
            return await self._read(first, min(last, self._lac))
        out: list[Entry] = []
        if first <= self._lac:
            out = await self._read(first, min(last, self._lac))
        for entry_id in range(max(first, self._lac + 1), last + 1):
            try:
                stored = await read_entry(
                    self._ctx, self.ledger_id, entry_id, write_set_bookies(self._md, entry_id)
                )
            except (NoSuchEntryError, BookieError):
                break
            out.append(Entry(self.ledger_id, stored.entry_id, stored.data))
            if self._ctx.metrics is not None:
                self._ctx.metrics.read_entries += 1
                self._ctx.metrics.read_bytes += len(stored.data)
        if not out:
            raise NoSuchEntryError(f"ledger {self.ledger_id}: entry {first} is not readable")
        return out

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies of the last fragment for the LAC and return the reader's LAC.

        The answer is taken once explicit answers cover every write quorum; the reader's
        LAC never goes backwards. A closed ledger answers its last entry without asking.
        """
        self._check_usable()
        await self._refresh_if_changed()
        if self.is_closed:
            return self._lac
        lac = await readops.read_last_add_confirmed(self._ctx, self._md)
        self._lac = max(self._lac, lac)
        return self._lac

    async def read_stored_tail(self) -> StoredTail:
        """An entry at or past every entry acknowledged before the call, without fencing:
        the highest entry the last fragment's bookies store, once their answers cover
        every write quorum (walog.ledger.tail). A closed ledger answers its last entry.

        It may lie past the last add confirmed: wait for the LAC to reach it (or the ledger
        to close) before reading it. The reader's LAC takes in the highest LAC the answers
        showed (it never goes backwards).

        Raises:
            BookieUnavailableError: too few bookies answered to cover every write quorum.
        """
        self._check_usable()
        await self._refresh_if_changed()
        if self.is_closed:
            return StoredTail(self._lac, None, self._lac)
        tail = await stored_tail(self._ctx, self._md)
        self._lac = max(self._lac, tail.lac)
        return tail

    # The public API (CONTRACT.md) takes the timeout as an argument.
    async def wait_last_add_confirmed(self, after: int, timeout: float) -> int:  # noqa: ASYNC109
        """Wait until the LAC exceeds ``after`` or ``timeout`` seconds pass; return the LAC.

        Fed by standing LAC watches on ``Qw - Qa + 1`` bookies of the next entry's write
        set (the first to report a LAC wins), while the ledger's metadata is watched: an
        ensemble change moves the watches, a close ends the wait with the last entry as
        LAC.
        """
        self._check_usable()
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout
        self._ensure_watch()
        while True:
            await self._refresh_if_changed()
            now = loop.time()
            remaining = deadline - now
            if self._lac > after or self.is_closed or remaining <= 0:
                metrics = self._ctx.metrics
                if metrics is not None and self._lac > after:
                    metrics.lac_wait.observe(now - started)
                return self._lac
            quiet = now - self._news_at
            if quiet >= LAC_RECHECK_S:
                # The watched bookies may have lost an explicit LAC in a restart (a bookie
                # does not sync it): while nothing comes, ask the ensemble now and then.
                self._news_at = now
                with contextlib.suppress(BookieError):
                    await self.read_last_add_confirmed()
                continue
            await self._lac_watch.wait(min(remaining, LAC_RECHECK_S - quiet))

    def _watch_target(self) -> tuple[list[str], int, int, int]:
        """The LAC watches' choice: ``Qw - Qa + 1`` bookies of the ensemble that will hold
        the next entry, those of its write set first; without striping they hold the
        following entries too: they bring them along."""
        md = self._md
        if md.is_closed:
            return [], 0, self._lac, 0
        count = LONG_POLL_PREFETCH if md.write_quorum == md.ensemble_size else 0
        write_set = write_set_bookies(md, self._lac + 1)
        others = [b for b in md.ensemble_for(self._lac + 1) if b not in write_set]
        watched = md.write_quorum - md.ack_quorum + 1
        return [*write_set, *others], watched, self._lac, count

    def _take_lac(self, bookie: str, reply: ReadReply) -> None:
        """A LAC watch answer: a higher LAC, and the entries it newly confirms, which a
        tailer reads next; the bookie that told is the one to read from."""
        known = self._lac
        if reply.lac <= known:
            return
        self._lac = reply.lac
        self._news_at = asyncio.get_running_loop().time()
        self._told_by = bookie
        room = _PREFETCH_KEPT - len(self._prefetched)
        for stored in reply.entries[:room]:
            if known < stored.entry_id <= reply.lac:
                self._prefetched[stored.entry_id] = stored

    async def close(self) -> None:
        """Stop watching the ledger's metadata and LAC. The reader cannot be used
        afterwards."""
        self._released = True
        await self._lac_watch.close()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    async def __aenter__(self) -> AsyncLedgerReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _check_usable(self) -> None:
        if self._released:
            raise ValueError(f"the reader of ledger {self.ledger_id} is closed")

    def _ensure_watch(self) -> None:
        if self._unwatch is not None or self.is_closed:
            return
        loop = asyncio.get_running_loop()

        def on_change() -> None:  # any thread
            # A closed loop raises RuntimeError: nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._metadata_changed)

        self._unwatch = self._ctx.store.watch(ledger_path(self.ledger_id), on_change)
        # The metadata may have changed between the open and the watch: look once.
        self._md_changed.set()

    def _metadata_changed(self) -> None:
        self._md_changed.set()
        self._lac_watch.wake()  # waiters refresh the metadata, then wait again

    async def _refresh_if_changed(self) -> None:
        if self._md_changed.is_set():
            self._md_changed.clear()
            try:
                await self._refresh()
            except BaseException:
                # Cancelled or failed before the new metadata was taken in: the change is
                # still unseen, so look again next time rather than believe the old state.
                self._md_changed.set()
                raise

    async def _refresh(self) -> None:
        metadata, version = await self._ctx.read_metadata(self.ledger_id)
        if version < self._version:
            return
        self._md, self._version = metadata, version
        if metadata.is_closed:
            # Recovery or the writer decided the last entry; it is the LAC from now on.
            self._lac = metadata.last_entry_id
            if self._unwatch is not None:
                self._unwatch()
                self._unwatch = None
            await self._lac_watch.close()
        else:
            self._lac_watch.retarget()

    async def _read(self, first: int, last: int) -> list[Entry]:
        """Read confirmed entries; on failure re-read the metadata once (a reader of an open
        ledger may not know the latest fragments yet) and try again."""
        cached = [self._prefetched.pop(e, None) for e in range(first, last + 1)]
        if all(s is not None for s in cached):
            entries = [Entry(s.ledger_id, s.entry_id, s.data) for s in cached if s is not None]
        else:
            try:
                stored = await self._read_stored(first, last)
            except (NoSuchEntryError, BookieUnavailableError):
                if self.is_closed:
                    raise
                await self._refresh()
                stored = await self._read_stored(first, last)
            entries = [Entry(s.ledger_id, s.entry_id, s.data) for s in stored]
        metrics = self._ctx.metrics
        if metrics is not None:
            metrics.read_entries += len(entries)
            metrics.read_bytes += sum(len(entry.data) for entry in entries)
        return entries

    async def _read_stored(self, first: int, last: int) -> list[StoredEntry]:
        md = self._md
        out: list[StoredEntry] = []
        for frag_first, frag_last, ensemble in md.fragment_bounds():
            lo = max(first, frag_first)
            hi = last if frag_last < 0 else min(last, frag_last)
            if lo > hi:
                continue
            if md.write_quorum == md.ensemble_size:
                # No striping: every bookie of the fragment holds every entry. The one that
                # reported the LAC last (a tailer's freshest bookie) goes first.
                start = lo % md.ensemble_size
                order = [ensemble[(start + i) % len(ensemble)] for i in range(len(ensemble))]
                if self._told_by in order:
                    order.remove(self._told_by)
                    order.insert(0, self._told_by)
                out.extend(await read_range(self._ctx, self.ledger_id, lo, hi, order))
            else:
                out.extend(await self._read_striped(lo, hi))
        return out

    async def _read_striped(self, first: int, last: int) -> list[StoredEntry]:
        limit = asyncio.Semaphore(MAX_CONCURRENT_ENTRY_READS)

        async def one(entry_id: int) -> StoredEntry:
            async with limit:
                return await read_entry(
                    self._ctx, self.ledger_id, entry_id, write_set_bookies(self._md, entry_id)
                )

        return list(await asyncio.gather(*(one(e) for e in range(first, last + 1))))


__all__ = ["LONG_POLL_PREFETCH", "MAX_CONCURRENT_ENTRY_READS", "AsyncLedgerReader"]

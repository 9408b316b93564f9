"""The transport interface the ledger protocol talks through.

The protocol code (walog/ledger) sees bookies only through :class:`BookieClient` and
:class:`BookiePool`. ``walog.transport.network`` implements them over the network, with
batched frames (a bookie's native port, or gRPC); the simulator (tests/sim) implements them
in memory with injected faults.

Bookie answers are values (a :class:`Status` per request), because the protocol counts
them (coverage, ack quorums). A bookie that cannot be reached or does not answer in time
raises :class:`walog.errors.BookieUnavailableError` (an *unknown* answer, never *absent*).
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import functools
from collections.abc import AsyncGenerator, Callable, Sequence

from walog.errors import BookieCallUnsupportedError, BookieUnavailableError
from walog.wire.durability import Durability
from walog.wire.packing import PackedEntries, unpack_entries
from walog.wire.status import Status


@dataclasses.dataclass(frozen=True, slots=True)
class StoredEntry:
    """An entry as a bookie serves it, digest already verified by the transport."""

    ledger_id: int
    entry_id: int
    lac: int
    data: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class AddReply:
    """A bookie's answer to one add.

    Attributes:
        status: The add's outcome.
        last_add_synced: The bookie's sync cursor for the ledger (docs/protocol.md,
            "LastAddSynced").
        incarnation: The bookie's incarnation: a random id drawn each time its storage
            opens, so a restart (which loses unsynced VOLATILE entries) shows as a new
            value; 0 when the bookie does not say.
        max_entry_bytes: With ENTRY_TOO_LARGE, the largest payload the bookie stores; 0
            when it does not say.
    """

    status: Status
    last_add_synced: int = -1
    incarnation: int = 0
    max_entry_bytes: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ForceReply:
    """A bookie's answer to a force (sync) of a ledger (fields as in :class:`AddReply`)."""

    status: Status
    last_add_synced: int = -1
    incarnation: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ReadReply:
    """A bookie's answer to a range read (consecutive entries from the first asked)."""

    status: Status
    entries: list[StoredEntry]
    lac: int = -1
    fenced: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ReadLacReply:
    """A bookie's LAC and last stored entry of a ledger."""

    status: Status
    lac: int = -1
    last_entry_id: int = -1
    last_entry: StoredEntry | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class FenceReply:
    """A bookie's answer to a fence request."""

    status: Status
    lac: int = -1
    last_entry_id: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class EntryListReply:
    """Which entries of a ledger a bookie holds within the range asked.

    Attributes:
        status: OK, NO_SUCH_LEDGER (it holds none), IO_ERROR (its index rows of the ledger
            are damaged: it cannot tell), BAD_REQUEST.
        ranges: with OK, the entries held as ``(first, last)`` ranges of consecutive ids,
            ascending and apart; copies the bookie found damaged are not among them.
    """

    status: Status
    ranges: tuple[tuple[int, int], ...] = ()


AddCallback = Callable[[AddReply | BaseException], None]
"""Receives the reply to one add, or the error that ended it (see BookieClient.add_then)."""

BatchCallback = Callable[[Sequence[int], AddReply | BaseException], None]
"""Receives the ids of entries queued by :meth:`BookieClient.add_packed` with the reply they
share, or with the error that ended them; called as often as replies group them."""


class BookieClient(abc.ABC):
    """A connection to one bookie. Adds are queued and sent in batched frames."""

    bookie_id: str

    @abc.abstractmethod
    def add(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        data: bytes,
        digest: int,
        master_key: bytes,
        *,
        recovery: bool = False,
        durability: Durability = Durability.PERSISTENT,
    ) -> asyncio.Future[AddReply]:
        """Queue an add; the future resolves with the bookie's reply or fails with
        BookieUnavailableError. Adds queued on one client reach the bookie in order."""

    def add_then(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        data: bytes,
        digest: int,
        master_key: bytes,
        callback: AddCallback,
        *,
        recovery: bool = False,
        durability: Durability = Durability.PERSISTENT,
    ) -> None:
        """Queue an add like :meth:`add`; call ``callback`` (on the event loop) with the
        reply, or with the error the future of :meth:`add` would fail with.

        The writer's hot path: a transport may override it to call back straight from its
        reply handling, without a future and a scheduled callback per add.
        """
        future = self.add(
            ledger_id,
            entry_id,
            lac,
            data,
            digest,
            master_key,
            recovery=recovery,
            durability=durability,
        )

        def done(f: asyncio.Future[AddReply]) -> None:
            if f.cancelled():
                callback(BookieUnavailableError(f"bookie {self.bookie_id}: add cancelled"))
                return
            exc = f.exception()
            callback(f.result() if exc is None else exc)

        future.add_done_callback(done)

    def add_packed(
        self,
        ledger_id: int,
        master_key: bytes,
        packed: PackedEntries,
        callback: BatchCallback,
        *,
        recovery: bool = False,
        durability: Durability = Durability.PERSISTENT,
    ) -> None:
        """Queue packed adds of one ledger, in order; ``callback`` (on the event loop) gets
        the ids of the entries each reply answers with that reply, or the error that ended
        them.

        The writer's hot path: it packs entries once for every bookie of their write
        quorum, and a transport sends the packed bytes as they are. This default unpacks
        them and queues them one by one with :meth:`add_then`.
        """
        entries, problem = unpack_entries(packed.blob)
        if problem is not None:
            raise ValueError(f"malformed packed entries: {problem}")
        for entry_id, lac, digest, data in entries:
            self.add_then(
                ledger_id,
                entry_id,
                lac,
                data,
                digest,
                master_key,
                functools.partial(_answer_one, callback, entry_id),
                recovery=recovery,
                durability=durability,
            )

    @abc.abstractmethod
    def send_lac(self, ledger_id: int, lac: int, master_key: bytes) -> None:
        """Queue an explicit LAC update (idle writer), ordered after earlier adds."""

    @abc.abstractmethod
    async def force(self, ledger_id: int, master_key: bytes) -> ForceReply:
        """Sync every entry of the ledger queued on this client so far."""

    @abc.abstractmethod
    async def read(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes = b"",
        previous_lac: int = -1,
        long_poll_timeout: float = 0.0,
    ) -> ReadReply:
        """Read a range (fence=True: recovery read that fences first; long_poll_timeout>0:
        wait on the bookie until its LAC exceeds previous_lac)."""

    async def watch_lac(
        self,
        ledger_id: int,
        previous_lac: int,
        *,
        max_entries: int,
        heartbeat: float,
        min_interval: float = 0.0,
    ) -> AsyncGenerator[ReadReply, None]:
        """A standing long poll: yields an answer each time the bookie's LAC passes the
        last one yielded (from ``previous_lac``), with up to ``max_entries`` of the newly
        confirmed entries, and the current LAC every ``heartbeat`` seconds without news.
        Answers that bring news come at least ``min_interval`` seconds apart.

        Ends only by raising (:class:`BookieUnavailableError` when the bookie goes away or
        stays silent) or by the caller closing it. This default chains long polls; a
        transport with server streaming overrides it to save a round trip per answer.
        """
        after = previous_lac
        while True:
            reply = await self.read(
                ledger_id,
                after + 1,
                after + max(1, max_entries),
                previous_lac=after,
                long_poll_timeout=heartbeat,
            )
            if not max_entries and reply.entries:
                reply = dataclasses.replace(reply, entries=[])
            news = reply.lac > after
            yield reply
            after = max(after, reply.lac)
            if news and min_interval > 0:
                await asyncio.sleep(min_interval)

    @abc.abstractmethod
    async def read_lac(self, ledger_id: int) -> ReadLacReply:
        """The bookie's LAC and last stored entry for the ledger."""

    @abc.abstractmethod
    async def fence(self, ledger_id: int, master_key: bytes) -> FenceReply:
        """Fence the ledger on this bookie (persisted before the reply)."""

    async def list_entries(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int
    ) -> EntryListReply:
        """Which entries of ``first_entry_id..last_entry_id`` the bookie holds, from its
        index alone (no entry is read).

        Raises:
            BookieCallUnsupportedError: the bookie (or this transport) does not know the
                call; the caller reads the entries one by one instead. This default raises
                it.
        """
        raise BookieCallUnsupportedError(f"bookie {self.bookie_id}: no entry lists here")


def _answer_one(callback: BatchCallback, entry_id: int, reply: AddReply | BaseException) -> None:
    callback((entry_id,), reply)


class BookiePool(abc.ABC):
    """Connections to bookies by id, shared by every ledger of a client."""

    @abc.abstractmethod
    def get(self, bookie_id: str) -> BookieClient:
        """The (lazily opened) connection to ``bookie_id``."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every connection; pending requests fail with BookieUnavailableError."""


__all__ = [
    "AddCallback",
    "AddReply",
    "BatchCallback",
    "BookieClient",
    "BookiePool",
    "EntryListReply",
    "FenceReply",
    "ForceReply",
    "ReadLacReply",
    "ReadReply",
    "StoredEntry",
]

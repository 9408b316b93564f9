"""The single writer of a ledger: striping, ack quorums, in-order completion, LAC
(docs/protocol.md, "Ledgers").

An append takes the next entry id and is sent to the write quorum of the current fragment's
ensemble (``write_set``) at the end of the event-loop turn, packed together with the other
appends of that turn: one call per bookie, and replies acknowledge runs of entries. It
completes when ``Qa`` bookies of its write quorum acknowledged it **and** every lower entry
completed; the LAC is the highest completed entry (VOLATILE ledgers: the LAC follows the
bookies' LastAddSynced values, docs/protocol.md, "The LAC of a VOLATILE ledger").

A bookie that errors or times out is replaced by an ensemble change
(walog/ledger/ensemble_change.py: a new fragment starting at the first entry not yet
completed, CAS on the metadata), then the pending entries of that fragment are resent to the
replacement. No add completes while a change is in flight: an ack from the bookie being
replaced must not count for the new fragment.

Each pending add records, per ensemble index, whether the bookie now at that index was sent
it (``sent``) and acknowledged it (``acked``). A replacement clears both bits of its index;
after every change, each pending add goes to every index of its write quorum that is
healthy and has neither bit set. So however many changes happen (and whatever was skipped
while an index was failed or had no replacement), no pending entry misses a bookie of its
write quorum: a request in flight to a bookie that stays is either answered or times out,
and the timeout replaces that bookie.

A bookie that refuses an entry as too large (ENTRY_TOO_LARGE: over its
``--max-entry-bytes``) is not replaced: the entry cannot be skipped, so the writer stops with
:class:`walog.RecordTooLargeError` naming the bookie, the size and its limit, and ``close()``
closes the ledger at its last confirmed entry.

Bookies learn the LAC with the next add, or from an explicit LAC message when no add
carries it in time (walog/ledger/explicit_lac.py).

A VOLATILE ledger never changes its ensemble (docs/protocol.md, "VOLATILE restrictions"),
and its bookies acknowledge entries from their page cache: a bookie that restarts loses
those it had not synced. Every answer carries the bookie's incarnation (drawn anew each time
its storage opens); the writer keeps, per ensemble index, the incarnation of the bookie's
answers and the highest entry it acknowledged. An answer from a new incarnation of a bookie
that had acknowledged entries above every LastAddSynced it reported (before or in that
answer) stops the writer before the answer counts: entries acknowledged after the loss would
follow a gap. A restart that kept everything (a clean one, or a kill the page cache
survived) changes nothing. PERSISTENT acknowledgements are durable, so their incarnations
are not checked.

Only :class:`LedgerContext` (store, pool, config) and the event loop are used here: no
sockets, threads or wall clock, so the simulator runs this code unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import functools
from collections.abc import Iterable, Sequence
from typing import Literal

import crc32c

from walog import mutations
from walog._loggers import get_logger
from walog._sinks import ALREADY_SETTLED, Sink
from walog.errors import (
    BookieReadOnlyError,
    BookieRestartedError,
    BookieUnavailableError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    RecordTooLargeError,
    UnauthorizedError,
    WalogError,
)
from walog.ledger.context import LedgerContext, metadata_retrying
from walog.ledger.durability import RestartWatch, lac_from_last_add_synced
from walog.ledger.ensemble_change import EnsembleChanges, LedgerRecord, WriterHooks
from walog.ledger.explicit_lac import ExplicitLac
from walog.ledger.placement import PlacementPolicy, placement_policy
from walog.ledger.quorum import write_set
from walog.metadata.layout import LedgerMetadata
from walog.transport.base import AddReply, BatchCallback, ForceReply
from walog.wire.digest import DIGEST_HEADER
from walog.wire.durability import Durability
from walog.wire.packing import PackedEntries
from walog.wire.status import Status

log = get_logger(__name__)


def as_payload(data: object, max_entry_bytes: int) -> bytes:
    """Validate an entry payload and return it as immutable bytes.

    Raises:
        TypeError: ``data`` is a ``str`` or not bytes-like.
        RecordTooLargeError: ``data`` is larger than ``max_entry_bytes`` (a ``ValueError``).
    """
    if isinstance(data, bytes):
        payload = data
    elif isinstance(data, str):
        raise TypeError("ledger entries are bytes; encode the str first (data.encode())")
    else:
        try:
            # A copy: the caller may reuse its buffer once append returns.
            payload = bytes(memoryview(data))  # type: ignore[arg-type]
        except TypeError as exc:
            raise TypeError(
                f"ledger entries are bytes-like objects, got {type(data).__name__}"
            ) from exc
    if len(payload) > max_entry_bytes:
        raise RecordTooLargeError(
            f"entry of {len(payload)} bytes exceeds max_entry_bytes={max_entry_bytes} "
            "(ClientConfig.max_entry_bytes); nothing was appended",
            size=len(payload),
            limit=max_entry_bytes,
        )
    return payload


@dataclasses.dataclass(slots=True, eq=False)
class PendingAdd:
    """An append not completed yet, with the ensemble indexes that acknowledged it."""

    entry_id: int
    data: bytes
    lac: int  # the LAC piggybacked on this entry (covered by its digest)
    digest: int
    future: Sink[int]
    acked: int = 0  # bit i set: the bookie at ensemble index i answered OK
    sent: int = 0  # bit i set: the add was sent to the bookie now at ensemble index i
    appended: float = 0.0  # loop time of the append (client metrics)


def pop_completed(pending: collections.deque[PendingAdd], ack_quorum: int) -> list[PendingAdd]:
    """Remove and return the adds that complete now, in entry-id order.

    An add completes when ``ack_quorum`` bookies of its write quorum acknowledged it **and**
    every lower entry completed (docs/protocol.md, "Entry ids and completion"): only the
    acknowledged prefix of ``pending`` (ordered by entry id) completes; an acknowledged add
    behind a gap waits.
    """
    if mutations.enabled("out_of_order_ack"):
        ready = [add for add in pending if add.acked.bit_count() >= ack_quorum]
        for add in ready:
            pending.remove(add)
        return ready
    done: list[PendingAdd] = []
    while pending and pending[0].acked.bit_count() >= ack_quorum:
        done.append(pending.popleft())
    return done


class AsyncLedgerWriter:
    """Appends entries to an OPEN ledger this client created.

    Use :func:`walog.ledger.create.create_ledger` (or ``AsyncClient.create_ledger``) to get
    one. Appends may be issued concurrently; entry ids are assigned in call order and the
    returned futures resolve strictly in entry-id order.
    """

    def __init__(
        self,
        ctx: LedgerContext,
        metadata: LedgerMetadata,
        version: int,
        master_key: bytes,
        *,
        placement: PlacementPolicy | None = None,
    ) -> None:
        if metadata.state != "OPEN":
            raise LedgerClosedError(f"ledger {metadata.ledger_id} is {metadata.state}")
        self._ctx = ctx
        self._metrics = ctx.metrics
        self._loop = asyncio.get_running_loop()
        self._record = LedgerRecord(metadata, version)
        self._master_key = master_key
        self._ledger_id = metadata.ledger_id
        self._e = metadata.ensemble_size
        self._qw = metadata.write_quorum
        self._qa = metadata.ack_quorum
        self._durability = metadata.durability
        self._changes = EnsembleChanges(
            ctx,
            self._record,
            placement_policy(placement),
            WriterHooks(
                appending=lambda: self._state == "open" and self._error is None,
                stopped=lambda: self._error is not None,
                first_uncompleted=lambda: self._completed + 1,
                fail=self._fail,
                switch=self._switch,
                settle=self._complete_ready,
            ),
        )
        self._ensemble = self._changes.ensemble  # replaced (not changed) by a change
        self._clients = [ctx.pool.get(b) for b in self._ensemble]  # by ensemble index
        self._on_replies = self._reply_handlers()  # by ensemble index
        # Write quorums repeat every E entries (docs/protocol.md, "Write quorums"): entry e
        # goes to the ensemble indexes set in _write_masks[e % E].
        self._write_masks = [
            sum(1 << index for index in write_set(i, self._e, self._qw)) for i in range(self._e)
        ]

        self._next_entry_id = 0
        self._completed = -1  # highest entry completed (acked by Qa, all lower completed)
        self._lac = -1
        self._las = [-1] * self._e  # VOLATILE: LastAddSynced per ensemble index
        # VOLATILE: per ensemble index, the incarnation of the bookie's answers and the
        # highest entry it acknowledged (a restart may have lost those above its LAS).
        self._restarts = [RestartWatch() for _ in range(self._e)]
        self._pending: collections.deque[PendingAdd] = collections.deque()
        self._by_id: dict[int, PendingAdd] = {}  # the pending adds by entry id
        # Appends of this event-loop turn, sent together at its end: one call per bookie.
        self._unsent: list[PendingAdd] = []
        self._drained = asyncio.Event()
        self._drained.set()
        # force() waiting for an entry to complete: (entry id, waiter), woken on completion.
        self._completion_waiters: list[tuple[int, asyncio.Future[None]]] = []

        self._state: Literal["open", "closing", "closed"] = "open"
        self._close_task: asyncio.Task[None] | None = None
        self._error: WalogError | None = None

        self._explicit_lac = ExplicitLac(
            self._loop,
            ctx.config,
            lac=lambda: self._lac,
            tell=self._tell_lac,
            stopped=lambda: self._error is not None,
            state=lambda: self._state,
        )

    # -- public state -----------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self._ledger_id

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id confirmed to readers (-1 before the first)."""
        return self._lac

    @property
    def last_add_pushed(self) -> int:
        """The highest entry id handed out so far (-1 before the first append)."""
        return self._next_entry_id - 1

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger's metadata as this writer last wrote or read it."""
        return self._record.metadata

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` finished."""
        return self._state == "closed"

    # -- appends ----------------------------------------------------------------------

    def append_nowait(self, data: bytes | bytearray | memoryview) -> asyncio.Future[int]:
        """Take the next entry id and send the entry; the future resolves with its id.

        Raises:
            TypeError: ``data`` is a ``str`` or not bytes-like.
            RecordTooLargeError: the entry exceeds ``ClientConfig.max_entry_bytes`` (no id is
                taken; a ``ValueError``).
            LedgerClosedError: the writer is closed or closing.
            LedgerFencedError: the ledger was fenced by a recovering reader.
        """
        future: asyncio.Future[int] = self._loop.create_future()
        self.append_into(data, future)
        return future

    def append_into(self, data: bytes | bytearray | memoryview, sink: Sink[int]) -> None:
        """Like :meth:`append_nowait`, resolving ``sink`` (an asyncio or a
        ``concurrent.futures`` future, or any :class:`walog._sinks.Sink`) with the entry id
        instead: the sync facade hands its own futures in and saves a future and a callback
        per entry. Call it on the loop thread."""
        # The per-entry path of every append: the usual case (bytes, an open writer) costs
        # a comparison each; the checks that raise run only when it is not that case.
        max_bytes = self._ctx.config.max_entry_bytes
        if type(data) is bytes and len(data) <= max_bytes:
            payload = data
        else:
            payload = as_payload(data, max_bytes)
        if self._error is not None or self._state != "open":
            self._check_appendable()
        entry_id = self._next_entry_id
        self._next_entry_id += 1
        lac = self._lac
        now = self._loop.time()
        header = DIGEST_HEADER.pack(self._ledger_id, entry_id, lac)
        digest = crc32c.crc32c(payload, crc32c.crc32c(header))  # entry_digest, inlined
        add = PendingAdd(entry_id, payload, lac, digest, sink, 0, 0, now)
        if not self._pending:
            self._drained.clear()  # set only while nothing is pending
        self._pending.append(add)
        self._by_id[entry_id] = add
        explicit = self._explicit_lac
        if lac > explicit.told:
            explicit.told = lac
        explicit.gap = now - explicit.last_append
        explicit.last_append = now
        if not self._unsent:
            self._loop.call_soon(self._flush)
        self._unsent.append(add)

    async def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append one entry and wait until it and every lower entry are confirmed."""
        return await self.append_nowait(data)

    async def __aenter__(self) -> AsyncLedgerWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_appendable(self) -> None:
        err = self._error
        if isinstance(err, LedgerFencedError | UnauthorizedError):
            raise type(err)(str(err))
        if self._state != "open":
            raise LedgerClosedError(f"ledger {self._ledger_id} is closed")
        if err is not None:
            raise type(err)(str(err))

    def _flush(self) -> None:
        adds, self._unsent = self._unsent, []
        if self._error is None:
            self._send(adds)

    def _send(self, adds: Iterable[PendingAdd]) -> None:
        """Send each add to every index of its write quorum that is healthy and neither
        acknowledged it nor was sent it since its bookie joined: packed once per set of
        indexes, one call per bookie."""
        e = self._e
        masks = self._write_masks
        skip = 0
        for index in self._changes.out_of_quorum():
            skip |= 1 << index
        # Grouped by the set of indexes (a bit mask), not by the write set's order: with
        # E == Qw and a healthy ensemble every add goes to the same indexes, so the adds of a
        # turn stay one group in entry order (bookies store in-order runs without lookups).
        groups: dict[int, list[PendingAdd]] = {}
        for add in adds:
            mask = masks[add.entry_id % e] & ~(add.acked | add.sent | skip)
            if mask:
                groups.setdefault(mask, []).append(add)
        config = self._ctx.config
        for mask, group in groups.items():
            for add in group:
                add.sent |= mask
            targets = [i for i in range(e) if mask >> i & 1]
            for packed in PackedEntries.chunks(
                group, max_entries=config.max_frame_entries, max_bytes=config.max_frame_bytes
            ):
                for index in targets:
                    on_reply = self._on_replies[index]
                    if self._metrics is not None:
                        on_reply = self._metrics.timed_reply(
                            self._ensemble[index], on_reply, self._loop.time
                        )
                    self._clients[index].add_packed(
                        self._ledger_id,
                        self._master_key,
                        packed,
                        on_reply,
                        durability=self._durability,
                    )

    # -- replies and completion -------------------------------------------------------

    def _reply_handlers(self) -> list[BatchCallback]:
        """One reply handler per ensemble index, bound to the bookie now there: a late reply
        from a replaced bookie is recognised and ignored."""
        return [
            functools.partial(self._on_reply, index, bookie)
            for index, bookie in enumerate(self._ensemble)
        ]

    def _on_reply(
        self, index: int, bookie: str, entry_ids: Sequence[int], reply: AddReply | BaseException
    ) -> None:
        if isinstance(reply, UnauthorizedError):
            self._fail(UnauthorizedError(str(reply)))
            return
        if isinstance(reply, BaseException):
            self._bookie_failed(index, bookie, str(reply) or type(reply).__name__)
            return
        if self._error is not None or self._ensemble[index] != bookie:
            return  # the writer stopped, or this bookie was replaced since
        if self._durability is Durability.VOLATILE and not self._same_data(
            index, bookie, reply.incarnation, reply.last_add_synced
        ):
            return  # the writer stopped before this answer counted
        if reply.status is Status.OK:
            if self._durability is Durability.VOLATILE:
                self._las[index] = max(self._las[index], reply.last_add_synced)
                if entry_ids:
                    self._restarts[index].acknowledged(max(entry_ids))
            bit = 1 << index
            by_id = self._by_id
            for entry_id in entry_ids:
                add = by_id.get(entry_id)
                if add is not None:  # else completed already (acked by others meanwhile)
                    add.acked |= bit
            self._complete_ready()
        elif reply.status is Status.FENCED:
            self._fail(
                LedgerFencedError(
                    f"ledger {self._ledger_id} was fenced (bookie {bookie}): a reader is "
                    "recovering it; entries not yet confirmed may or may not be in it"
                )
            )
        elif reply.status is Status.UNAUTHORIZED:
            self._fail(
                UnauthorizedError(
                    f"bookie {bookie} refused ledger {self._ledger_id}: wrong password "
                    "(master key) or credentials"
                )
            )
        elif reply.status is Status.ENTRY_TOO_LARGE:
            # Not a failed bookie: another would be asked to store an entry over its limit
            # too, and the writer would end as if it had lost every bookie.
            self._fail(self._too_large(bookie, entry_ids, reply.max_entry_bytes))
        else:
            self._bookie_failed(index, bookie, reply.status.name)

    def _too_large(self, bookie: str, entry_ids: Sequence[int], limit: int) -> RecordTooLargeError:
        """The error of entries a bookie refused as over its limit (0: it did not say)."""
        adds = [self._by_id[i] for i in entry_ids if i in self._by_id]
        first = min(adds, key=lambda add: add.entry_id) if adds else None
        size = len(first.data) if first is not None else 0
        which = f"entry {first.entry_id} ({size} bytes)" if first is not None else "an entry"
        over = f"its max_entry_bytes={limit}" if limit else "its max_entry_bytes"
        return RecordTooLargeError(
            f"bookie {bookie} refused {which} of ledger {self._ledger_id} as over {over} "
            "(walog bookie --max-entry-bytes); the ledger takes no more entries (close() "
            "closes it at its last confirmed entry)",
            size=size,
            limit=limit or None,
        )

    def _same_data(self, index: int, bookie: str, incarnation: int, last_add_synced: int) -> bool:
        """Whether an answer of a VOLATILE ledger's bookie may count: False, after stopping
        the writer, when it comes from a new incarnation of a bookie that may have lost
        entries it acknowledged (:class:`RestartWatch`)."""
        lost = self._restarts[index].answer(incarnation, max(self._las[index], last_add_synced))
        if lost is None:
            return True
        if lost and not mutations.enabled("volatile_writer_ignores_restart"):
            self._fail(
                BookieRestartedError(
                    f"bookie {bookie} restarted and may have lost entries {lost.start}.."
                    f"{lost.stop - 1} of VOLATILE ledger {self._ledger_id}, acknowledged but "
                    "not yet synced; the writer stops before acknowledging anything later "
                    "(recover the ledger with open_ledger(ledger_id, recovery=True) to close "
                    "it at what its bookies still hold)"
                )
            )
            return False
        log.info("bookie restarted", ledger_id=self._ledger_id, bookie=bookie, lost=len(lost))
        return True

    def _complete_ready(self) -> None:
        """Complete the pending adds at the head that reached Qa acks, in entry-id order."""
        if self._changes.changing or self._error is not None:
            return  # acks may still be discounted by the ensemble change in flight
        done = pop_completed(self._pending, self._qa)
        if done:
            self._completed = max(self._completed, done[-1].entry_id)
            by_id = self._by_id
            for add in done:
                del by_id[add.entry_id]
            if self._metrics is not None:
                self._metrics.completed(done, self._loop.time())
        self._advance_lac()
        if not self._pending:
            self._drained.set()
        for add in done:
            try:  # noqa: SIM105 (suppress() would cost a context manager per entry)
                add.future.set_result(add.entry_id)
            except ALREADY_SETTLED:
                pass  # its caller cancelled it
        if self._completion_waiters:
            self._wake_completion_waiters()

    async def _completion_of(self, entry_id: int) -> None:
        """Wait until ``entry_id`` completed or the writer failed (whatever its sink)."""
        if self._completed >= entry_id or self._error is not None:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._completion_waiters.append((entry_id, waiter))
        await waiter

    def _wake_completion_waiters(self) -> None:
        waiting, self._completion_waiters = self._completion_waiters, []
        for entry_id, waiter in waiting:
            if self._completed >= entry_id or self._error is not None:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                self._completion_waiters.append((entry_id, waiter))

    def _advance_lac(self) -> None:
        if self._durability is Durability.VOLATILE:
            # The LAC passes only entries synced on enough bookies (docs/protocol.md, "The
            # LAC of a VOLATILE ledger").
            synced = lac_from_last_add_synced(self._las, self._qw, self._qa)
            lac = max(self._lac, min(synced, self._completed))
        else:
            lac = self._completed
        if lac > self._lac:
            self._lac = lac
            self._explicit_lac.raised()

    def _tell_lac(self) -> None:
        """Send the LAC to every healthy bookie of the ensemble (when: see
        walog/ledger/explicit_lac.py)."""
        out = self._changes.out_of_quorum()
        for index, bookie in enumerate(self._ensemble):
            if index not in out:
                self._ctx.pool.get(bookie).send_lac(self._ledger_id, self._lac, self._master_key)

    # -- failures ---------------------------------------------------------------------

    def abort(self, error: WalogError) -> None:
        """Stop appending: every add not yet completed, and every later one, fails with
        ``error``. The ledger stays OPEN (a reader's recovery closes it)."""
        self._fail(error)

    def _fail(self, error: WalogError) -> None:
        """Stop the writer: every add not yet completed (and every later one) fails."""
        if self._error is not None:
            return
        self._error = error
        if self._metrics is not None and isinstance(error, LedgerFencedError):
            self._metrics.fenced_writers += 1
        self._explicit_lac.stop()
        self._changes.cancel_retry()
        log.warning("ledger writer stopped", ledger_id=self._ledger_id, error=str(error))
        pending, self._pending = self._pending, collections.deque()
        self._by_id.clear()
        self._unsent.clear()
        self._drained.set()
        for add in pending:
            if not add.future.done():
                add.future.set_exception(copy.copy(error))
        self._wake_completion_waiters()

    def _bookie_failed(self, index: int, bookie: str, reason: str) -> None:
        if self._error is not None or self._state == "closed":
            return
        if self._state == "closing" and not self._pending:
            # Every entry is settled and the close CAS may be in flight: an ensemble change
            # now would write a new fragment into the metadata of a CLOSED ledger.
            return
        if self._ensemble[index] != bookie or index in self._changes.out_of_quorum():
            return  # already replaced, being replaced, or nothing could replace it
        log.info("bookie failed", ledger_id=self._ledger_id, bookie=bookie, reason=reason)
        if self._metrics is not None:
            self._metrics.bookie_errors[bookie] += 1
        if self._durability is Durability.VOLATILE:
            # VOLATILE ledgers never change their ensemble (docs/protocol.md, "VOLATILE
            # restrictions").
            read_only = reason == Status.READ_ONLY.name
            error = BookieReadOnlyError if read_only else BookieUnavailableError
            what = "turned read-only" if read_only else f"failed ({reason})"
            self._fail(
                error(
                    f"bookie {bookie} {what}; VOLATILE ledger {self._ledger_id} cannot "
                    "replace bookies, so its writer stops"
                )
            )
            return
        self._changes.bookie_failed(index, bookie)

    def _switch(self, moved: int) -> None:
        """An ensemble change was written: the bookies at the indexes of ``moved`` (a bit
        mask) were replaced. Send the pending adds to the new ones."""
        self._ensemble = self._changes.ensemble
        self._clients = [self._ctx.pool.get(b) for b in self._ensemble]
        self._on_replies = self._reply_handlers()
        for add in self._pending:
            # What the replaced bookie acked or was sent no longer counts for the new one.
            add.acked &= ~moved
            add.sent &= ~moved
        self._send(self._pending)

    # -- force and close --------------------------------------------------------------

    async def force(self) -> int:
        """Make every entry appended so far durable; return the last synced entry id.

        VOLATILE ledgers send a force to every bookie of the ensemble and recompute the LAC
        from their LastAddSynced answers. PERSISTENT ledgers are durable on ack: this
        returns :attr:`last_add_confirmed` once earlier appends completed.
        """
        if self._pending:
            # A failure is reported below as the writer's error.
            await self._completion_of(self._pending[-1].entry_id)
        if self._error is not None:
            raise type(self._error)(str(self._error))
        if self._durability is Durability.PERSISTENT:
            return self._lac
        await self._force_ensemble()
        if self._error is not None:
            raise type(self._error)(str(self._error))
        return self._lac

    async def _force_ensemble(self) -> list[str]:
        """Ask every bookie of the ensemble to sync the ledger and advance the LAC over what
        they synced (docs/protocol.md, "Force"); return what went wrong, one text per bookie
        that did not answer OK (while closing, a failed bookie does not stop the writer)."""
        ensemble = list(self._ensemble)
        replies = await asyncio.gather(
            *(self._ctx.pool.get(b).force(self._ledger_id, self._master_key) for b in ensemble),
            return_exceptions=True,
        )
        problems = []
        for index, (bookie, reply) in enumerate(zip(ensemble, replies, strict=True)):
            self._on_force_reply(index, bookie, reply)
            if isinstance(reply, BaseException):
                problems.append(f"{bookie}: {str(reply) or type(reply).__name__}")
            elif reply.status is not Status.OK:
                problems.append(f"{bookie}: {reply.status.name}")
        self._advance_lac()
        return problems

    def _on_force_reply(self, index: int, bookie: str, reply: ForceReply | BaseException) -> None:
        if isinstance(reply, BaseException):
            if not isinstance(reply, Exception):
                raise reply
            self._bookie_failed(index, bookie, str(reply) or type(reply).__name__)
        elif not self._same_data(index, bookie, reply.incarnation, reply.last_add_synced):
            return  # the writer stopped: this bookie lost entries it acknowledged
        elif reply.status is Status.OK:
            self._las[index] = max(self._las[index], reply.last_add_synced)
        elif reply.status is Status.FENCED:
            self._fail(LedgerFencedError(f"ledger {self._ledger_id} was fenced ({bookie})"))
        elif reply.status is Status.UNAUTHORIZED:
            self._fail(UnauthorizedError(f"bookie {bookie} refused ledger {self._ledger_id}"))
        else:
            self._bookie_failed(index, bookie, reply.status.name)

    async def close(self) -> None:
        """Wait for outstanding adds, then CAS the metadata to CLOSED at the LAC.

        Raises:
            LedgerFencedError: the ledger was recovered by someone else and its last entry
                differs from this writer's LAC, or recovery is under way.
        """
        if self._close_task is None:
            if self._state == "open":
                self._state = "closing"
            self._changes.cancel_retry()
            self._close_task = self._loop.create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        try:
            while self._pending or self._changes.task is not None:
                if self._changes.task is not None:
                    await asyncio.shield(self._changes.task)
                else:
                    await self._drained.wait()
            self._explicit_lac.stop()
            await self._cas_close(await self._closing_end())
        except WalogError as exc:
            if self._error is None:
                self._error = exc
            raise
        finally:
            self._state = "closed"

    async def _closing_end(self) -> int:
        """The last entry the close records: the last one acknowledged to the caller
        (docs/protocol.md, "Closing as a writer"), never less.

        A VOLATILE ledger's LAC follows what its bookies synced, which may lag
        the acknowledged entries: the close forces the ensemble first and closes at the
        LAC that reaches. If it cannot reach every acknowledged entry (a bookie is down),
        the close fails and the ledger stays OPEN, so that recovery, which reads what the
        bookies hold, closes it with every acknowledged entry.
        """
        if mutations.enabled("close_short_of_acks"):
            return self._lac
        problems: list[str] = []
        if self._lac < self._completed and self._error is None:
            problems = await self._force_ensemble()
        if self._lac >= self._completed:
            return self._lac
        error = self._error
        cause = f"{error}" if error is not None else "; ".join(problems) or "no bookie synced"
        message = (
            f"cannot close {self._durability.name} ledger {self._ledger_id}: entries up to "
            f"{self._completed} were acknowledged but only up to {self._lac} are synced on "
            f"ack_quorum={self._qa} bookies ({cause}); the ledger stays OPEN, recover it "
            "(open_ledger(ledger_id, recovery=True)) to close it with the acknowledged entries"
        )
        if isinstance(error, LedgerFencedError | UnauthorizedError):
            raise type(error)(message)
        raise BookieUnavailableError(message)

    async def _cas_close(self, last: int) -> None:
        record = self._record
        async for attempt in metadata_retrying():
            with attempt:
                closed = record.metadata.with_changes(state="CLOSED", last_entry_id=last)
                try:
                    record.version = await self._ctx.write_metadata(closed, record.version)
                    record.metadata = closed
                    return
                except MetadataConflictError:
                    current, version = await self._ctx.read_metadata(self._ledger_id)
                    if current.state == "OPEN" or (
                        current.state == "IN_RECOVERY"
                        and mutations.enabled("close_while_in_recovery")
                    ):
                        record.metadata, record.version = current, version
                        raise  # retry on the new version
                if current.state == "CLOSED" and current.last_entry_id == last:
                    record.metadata, record.version = current, version
                    return
                if current.state == "CLOSED":
                    raise LedgerFencedError(
                        f"ledger {self._ledger_id} was closed by recovery at entry "
                        f"{current.last_entry_id}, but this writer confirmed up to {last}"
                    )
                raise LedgerFencedError(
                    f"ledger {self._ledger_id} is being recovered ({current.state}); "
                    "this writer cannot close it"
                )


__all__ = [
    "AsyncLedgerWriter",
    "PendingAdd",
    "as_payload",
    "pop_completed",
]

"""The log writer: takeover, record batching and rolling (docs/protocol.md, "Logs").

Takeover (:func:`open_log_writer`) follows "Takeover" there (its steps are in
walog.log.takeover): read the ledger list, fence and recover the last two ledgers (and any
earlier one still OPEN), create a new ledger, append it to the list, CAS-write the list. A
lost CAS starts again from the read; the ledger created for it is deleted. No record is
accepted before the CAS succeeded. Each takeover bumps the log's ``epoch``. Recovered
ledgers that turn out empty leave the list in the same CAS (as pending deletions).

Records are packed into entries (walog.log.records) by size, count and linger time; a
record's future resolves with its position once its entry is acknowledged. Rolling follows
"Rolling": create the next ledger, CAS-append it, switch new entries to it, then close the
previous one, so appends never wait for the metadata store. Closing the ledgers left behind
(by recovery, in the background, where a close fails) is walog.log.retire's job.

Records are acknowledged in append order, across rolls too. Any failed entry ends the
writer and fails every later record with it, so the acknowledged records are always a prefix
of the appended ones (a WAL's users rely on every acknowledged record's predecessors being in
the log). The records in the log are a prefix too: after a switch, entries for the new ledger
are held back until every entry sent to the previous ones completed. Sent at once, one could
become durable in the new ledger while an older entry fails and is left out of its ledger by
recovery, a hole no reader could tell from a record never appended. A fenced or
recovered ledger means another writer took over: the error is
:class:`walog.WriterFencedError`.

One failure does not end the writer: a bookie's refusal of an entry as too large (over its
``--max-entry-bytes``, walog.log.entry_limit). None of that ledger's records not acknowledged
yet is in the log (the ledger is closed at its last acknowledged entry). The writer makes no
larger entry than the bookie's limit from then on, packs those records again, in their
order and with the ones appended since, into entries within that limit
(:func:`walog.log.entry_limit.repack`), and holds them, as entries held behind a roll, for
the next ledger: it rolls, and they go once the refused ledger is closed. Only a record that
no such entry holds fails, with :class:`walog.RecordTooLargeError` naming its size and the
limit; the records in the log stay those acknowledged, in append order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import math
import time
from typing import Protocol

from walog import mutations
from walog._loggers import get_logger
from walog.errors import (
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    RecordTooLargeError,
    SessionExpiredError,
    WalogError,
    WriterFencedError,
)
from walog.ledger.options import LedgerOptions
from walog.log.entry_limit import check_entry_limit, record_too_large
from walog.log.ledgers import LedgerClientLike, LedgerWriterLike
from walog.log.log_metadata import LedgerInfo, LogMetadata, cas_retrying, update_log
from walog.log.position import Position, resolve_positions
from walog.log.records import (
    HEADER_BYTES,
    RECORD_OVERHEAD_BYTES,
    TAGGED_FORMAT_VERSION,
    RecordBatch,
    producer_prefix,
    record_bytes,
)
from walog.log.registration import WriterRegistration, register_writer
from walog.log.retention import RollPolicy
from walog.log.retire import ActiveLedger, RetireHooks, Retirements, fenced
from walog.log.sessions import Sessions, start_sessions
from walog.log.takeover import (
    ListChanged,
    applied,
    create_log_ledger,
    discard_unlisted_after,
    last_timestamp,
    take_over_once,
)
from walog.log.writer_packing import Packing, PositionSink
from walog.wire.durability import Durability
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES

log = get_logger(__name__)

_wall_clock = time.time  # a record's timestamp; bound once, read per record
_Future = asyncio.Future

ROLL_RETRY_SECONDS = 1.0
"""After a failed automatic roll, the next one is tried no sooner than this."""


class RollFollower(Protocol):
    """What runs after each roll of a writer (``walog.log.retention_runner``): told of each
    roll, never awaited by it, stopped when the writer closes."""

    def rolled(self) -> None:
        """A roll switched to a new ledger and closed the previous one."""

    async def wait_idle(self) -> None:
        """Return once no work is under way or asked for."""

    async def stop(self) -> None:
        """The writer closes."""


@dataclasses.dataclass(frozen=True)
class LogWriterConfig:
    """How records are batched into entries.

    Attributes:
        max_entry_bytes: an entry (records + format overhead) never exceeds this
            (default: :data:`walog.wire.limits.DEFAULT_MAX_ENTRY_BYTES`, 5 MiB, the
            bookies' and the client's default too); a single record that cannot fit alone
            raises :class:`walog.RecordTooLargeError`. Checked at open against the client's
            ``ClientConfig.max_entry_bytes`` and the limit each available bookie announces.
        max_records_per_entry: records per entry at most.
        linger: seconds a partly filled entry waits for more records; 0 sends it at the end
            of the current event-loop iteration (records appended together share an entry).
    """

    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    max_records_per_entry: int = 4096
    linger: float = 0.0

    def __post_init__(self) -> None:
        RecordBatch(self.max_entry_bytes, self.max_records_per_entry)  # validates the limits
        if self.linger < 0:
            raise ValueError(f"LogWriterConfig.linger must be >= 0, got {self.linger}")


@dataclasses.dataclass(slots=True, eq=False)
class _SentEntry:
    """An entry sent to a ledger, with the sinks of its records (in slot order) and its
    bytes (the ledger's writer holds them too until the entry completes), which go again to
    the next ledger if a bookie refuses them as too large."""

    ledger: ActiveLedger
    sinks: list[PositionSink]
    entry: asyncio.Future[int]
    payload: bytes


class AsyncLogWriter(Packing):
    """The single writer of a log, on the event loop. Made by :func:`open_log_writer`.
    Its records' timestamps never decrease, from ``last_stamp`` on (docs/time.md).

    Attributes:
        producer: the producer whose session the writer's records belong to (None: none).
        sessions: the writer's producer sessions (walog.log.sessions), None when it has
            none: it then writes entry format 1 only.
    """

    def __init__(
        self,
        client: LedgerClientLike,
        name: str,
        epoch: int,
        ledger: LedgerWriterLike,
        options: LedgerOptions,
        roll_policy: RollPolicy,
        config: LogWriterConfig,
        last_stamp: float = -math.inf,
    ) -> None:
        self._client = client
        self.name = name
        self.epoch = epoch
        self._clock = _wall_clock  # records' timestamps (tests put a skewed clock here)
        self._last_stamp = last_stamp  # the highest given yet; at first the log's last
        self.producer: str | None = None
        self.sessions: Sessions | None = None
        self._tagged = False  # once a record of a producer came: format-2 entries
        self._options = options
        self._volatile = options.durability is Durability.VOLATILE
        self._roll_policy = roll_policy
        self._config = config
        # The largest entry made: the config's, lowered to a bookie's that refused one.
        self._entry_bytes = config.max_entry_bytes
        self._refused: ActiveLedger | None = None  # a ledger a bookie refused an entry of
        self._loop = asyncio.get_running_loop()
        self._batch = self._new_batch()
        self._batch_futures: list[PositionSink] = []
        self._flush_handle: asyncio.Handle | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None
        self._roll_task: asyncio.Task[BaseException | None] | None = None
        self._roll_retry_at = 0.0  # loop time before which no automatic roll is tried
        self._roll_retry: asyncio.TimerHandle | None = None  # tries it at _roll_retry_at
        self._age_timer: asyncio.TimerHandle | None = None
        # The ledgers a roll switched away from, until closed (or closed by recovery).
        self._old = Retirements(
            client,
            name,
            options.password,
            epoch=epoch,
            volatile=self._volatile,
            hooks=RetireHooks(
                failure=lambda: self._failure,
                fail=self._fail,
                holding=lambda: bool(self._held),
                release=self._release_held,
                inflight=lambda ledger: [
                    sent.entry for sent in self._undelivered if sent.ledger is ledger
                ],
            ),
        )
        # Entries not yet delivered to their records' sinks, in the order they were sent.
        self._undelivered: collections.deque[_SentEntry] = collections.deque()
        # Entries for the current ledger not sent yet, (payload, size, sinks) each: held
        # while an entry of an earlier ledger is undelivered (:meth:`_behind_a_roll`).
        self._held: collections.deque[tuple[bytes, int, list[PositionSink]]] = collections.deque()
        self._current = self._activate(ledger)
        self.after_roll: RollFollower | None = None
        """Told after each roll (the log's retention, walog.log.retention_runner)."""
        self.registration: WriterRegistration | None = None
        """This writer's registration (walog.log.registration), removed when it ends."""

        # Leadership lasts as long as the metadata session that took the log over.
        def expired() -> None:
            self._loop.call_soon_threadsafe(self._session_expired)

        self._stop_watching_session = client.ctx.store.on_session_expired(expired)

    # -- appends ---------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        """The ledger new records go to."""
        return self._current.ledger_id

    def append_nowait(
        self, data: bytes | bytearray | memoryview, seq: int | None = None
    ) -> asyncio.Future[Position]:
        """Queue a record; the future resolves with its position once its entry is acked.
        With a producer, ``seq`` numbers it (None: the last seq + 1); a seq the log holds
        resolves with its first position, nothing written (docs/logs.md, "Producer
        sessions").

        Raises:
            TypeError: ``data`` is not bytes-like, or ``seq`` not an int.
            RecordTooLargeError: the record cannot fit in an entry of ``max_entry_bytes``
                (a ``ValueError``); the writer goes on.
            ValueError: ``seq`` is negative; the writer goes on.
            SequenceError: ``seq`` without a producer, skipped, or too old
                (SequenceTooOldError); the writer goes on.
            WriterFencedError: another writer took over.
            LedgerClosedError: this writer is closed.
        """
        # asyncio.Future itself rather than loop.create_future(), which on asyncio's loops
        # only wraps it: one Python call less per record.
        future: asyncio.Future[Position] = _Future(loop=self._loop)
        self.append_into(data, future, seq)
        return future

    def append_into(
        self, data: bytes | bytearray | memoryview, sink: PositionSink, seq: int | None = None
    ) -> None:
        """Like :meth:`append_nowait`, resolving ``sink`` (an asyncio or a
        ``concurrent.futures`` future) instead: the sync facade hands its own futures in
        and saves a future and a callback per record. Call it on the loop thread."""
        # The per-record path of the log: every check here runs for each record, so the
        # rare cases (a failed or closed writer, a non-bytes payload, a full batch) cost a
        # branch each and the common one nothing more.
        if self._failure is not None or self._closed:
            self._check_usable()
        if seq is not None or self.producer is not None:
            self.append_as(self.producer, seq, data, sink)
            return
        if type(data) is not bytes:
            data = record_bytes(data)
        batch = self._batch
        if not batch.fits(len(data)):
            if len(data) > batch.max_payload_bytes:
                raise record_too_large(self.name, len(data), self._entry_bytes)
            self._send_batch()
            batch = self._batch
        self._batch_futures.append(sink)
        # Timestamps never decrease within a log: not below the last one of this writer,
        # nor below the last record of the log it took over (``last_stamp``).
        self._last_stamp = stamp = max(self._clock(), self._last_stamp)
        if batch.add(stamp, data):
            self._send_batch()
        elif self._flush_handle is None:
            self._schedule_flush()

    async def append(
        self, data: bytes | bytearray | memoryview, seq: int | None = None
    ) -> Position:
        """Append a record and return its position once it is durable (acked); ``seq`` as
        for :meth:`append_nowait`."""
        return await self.append_nowait(data, seq)

    async def flush(self) -> None:
        """Send the partly filled entry now and wait until every record appended so far is
        durable: acknowledged, which in a PERSISTENT log means synced on Qa bookies; a
        VOLATILE log's records are then forced (docs/protocol.md, "Force") and the closes of
        the ledgers it rolled away from awaited (a close forces too).

        Raises:
            WriterFencedError: another writer took over (or the first other failure).
            WalogError: a VOLATILE log's records could not all be made durable (e.g. a
                bookie is down, or a ledger rolled away from is still being recovered); a
                later flush tries again.
        """
        await self._drain()
        if self._volatile and not mutations.enabled("volatile_log_flush_skips_force"):
            await self._make_durable()

    async def _make_durable(self) -> None:
        """Force the current ledger and wait for the closes of the ones rolled away from
        (everything sent is acknowledged)."""
        old = self._old
        if old.retiring:
            await old.none_retiring()  # switched away: a close forces every entry
        if old.recoveries:
            raise WalogError(
                f"log {self.name!r}: records are acknowledged but not known durable: the "
                f"close of ledger {old.recovering()} failed, and it is being closed by "
                "recovery; flush again later"
            )
        current = self._current
        last = current.writer.last_add_pushed
        try:
            synced = await current.writer.force()
        except (LedgerFencedError, LedgerClosedError) as exc:
            error = fenced(self.name, current.ledger_id, exc)
            self._fail(error)
            raise error from exc
        if synced < last:
            raise WalogError(
                f"log {self.name!r}: records up to entry {last} of ledger "
                f"{current.ledger_id} are acknowledged but only up to {synced} are synced "
                f"on ack_quorum bookies; flush again later"
            )

    async def _drain(self, *, recoveries: bool = False) -> None:
        """Send the partly filled entry now and wait until every record sent is
        acknowledged. Held entries go out once every earlier one completed and, in a
        VOLATILE log, once the ledgers rolled away from are closed: waited for too, those
        closed by recovery only with ``recoveries`` (else their records raise here)."""
        self._send_batch()
        old = self._old
        # wait(), not gather(): a cancelled caller must not cancel the entries.
        while self._undelivered or self._held:
            if self._undelivered:
                await asyncio.wait([sent.entry for sent in self._undelivered])
            elif old.retiring:
                await old.none_retiring()
            elif old.recoveries and recoveries:
                await asyncio.wait(old.recoveries)
            elif old.recoveries:
                raise WalogError(
                    f"log {self.name!r}: records wait for ledger "
                    f"{old.recovering()} to be closed by recovery; flush again later"
                )
            elif self._current is self._refused:
                await self.roll()  # the held records go to the next ledger
            else:
                self._release_held()  # nothing keeps them back any more
                if self._held and not self._undelivered:
                    raise AssertionError(f"log {self.name!r}: entries held for nothing")
        if self._failure is not None:
            raise self._failure

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise LedgerClosedError(f"log writer of {self.name!r} is closed")

    def _send_batch(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not self._batch_futures:
            if self._batch.version != TAGGED_FORMAT_VERSION and self._tagged:
                self._batch = self._new_batch()
            return
        batch, futures = self._batch, self._batch_futures
        self._batch, self._batch_futures = self._new_batch(), []
        if self._failure is not None:
            self._fail_futures(futures, self._failure)
            return
        payload = batch.encode()
        if (self._held or self._behind_a_roll()) and not mutations.enabled(
            "log_sends_across_roll_at_once"
        ):
            self._held.append((payload, batch.size, futures))
            return
        self._send_entry(payload, batch.size, futures)

    def _behind_a_roll(self) -> bool:
        """Whether new entries wait: while an entry of an earlier ledger is undelivered
        (so, in flight), and in a VOLATILE log while a ledger rolled away from is not
        closed yet. Its acknowledged entries may sit in the bookies' page cache until its
        close forces them (or a recovery finds what is left): a record that became durable
        in the next ledger meanwhile would outlive earlier ones a crash took."""
        undelivered = self._undelivered
        if undelivered and undelivered[0].ledger is not self._current:
            return True
        refused = self._refused
        if refused is not None and (refused is self._current or self._old.ending(refused)):
            # It takes no more entries: they wait for the next ledger, and for the refused
            # one's close, which fixes its end (a record must not be in both).
            return True
        return self._volatile and self._old.busy

    def _release_held(self) -> None:
        """Send the held entries once nothing earlier keeps them back."""
        held = self._held
        while held and not self._behind_a_roll():
            self._send_entry(*held.popleft())

    def _send_entry(self, payload: bytes, size: int, futures: list[PositionSink]) -> None:
        """Append one entry of records to the current ledger."""
        ledger = self._current
        try:
            entry = ledger.writer.append_nowait(payload)
        except (LedgerFencedError, LedgerClosedError) as exc:
            self._fail(fenced(self.name, ledger.ledger_id, exc))
            self._fail_futures(futures, self._failure or exc)
            return
        except RecordTooLargeError as exc:
            if any(sent.ledger is ledger for sent in self._undelivered):
                # The ledger's writer stopped on a bookie's refusal not delivered yet: this
                # entry waits, first of the held ones, to be packed again with its entries.
                self._refused = ledger
                self._held.appendleft((payload, size, futures))
                return
            self._fail(exc)
            self._fail_futures(futures, exc)
            return
        except Exception as exc:  # e.g. an entry over the client's limit: nothing was sent
            self._fail(exc)
            self._fail_futures(futures, exc)
            return
        ledger.entries += 1
        ledger.size_bytes += size
        self._undelivered.append(_SentEntry(ledger, futures, entry, payload))
        entry.add_done_callback(self._entry_done)
        self._maybe_roll()

    def _entry_done(self, entry: asyncio.Future[int]) -> None:
        # Within a ledger entries complete in order; an entry of the new ledger is sent
        # only once the older ones completed (but delivery does not count on it).
        undelivered = self._undelivered
        while undelivered and undelivered[0].entry.done():
            error = self._deliver(undelivered.popleft())
            if error is not None:
                # Every later record fails with this one, whatever its entry's outcome.
                while undelivered:
                    self._fail_futures(undelivered.popleft().sinks, error)
                return
        self._release_held()

    def _deliver(self, sent: _SentEntry) -> BaseException | None:
        """Resolve the records of a completed entry; when the entry failed, fail them and
        the writer and return the error."""
        entry, sinks = sent.entry, sent.sinks
        if entry.cancelled():
            self._fail(WalogError(f"log {self.name!r}: an entry send was cancelled"))
            error = self._failure or asyncio.CancelledError()
            self._fail_futures(sinks, error)
            return error
        exc = entry.exception()
        if isinstance(exc, RecordTooLargeError):
            self._entry_refused(sent, exc)
            return None  # the writer goes on in the next ledger
        if exc is not None:
            if isinstance(exc, LedgerFencedError | LedgerClosedError):
                exc = fenced(self.name, sent.ledger.ledger_id, exc)
            self._fail(exc)
            self._fail_futures(sinks, exc)
            return exc
        entry_id = entry.result()
        ledger = sent.ledger
        if ledger.first_acked is None:
            ledger.first_acked = sent.payload
        ledger.last_acked = sent.payload  # the ledger's time range, once it is closed
        ledger_id = ledger.ledger_id  # a property chain: read once per entry
        if self.sessions is not None:
            self.sessions.entry_acked(ledger_id, entry_id, len(sinks))
        resolve_positions(sinks, ledger_id, entry_id)
        return None

    def _entry_refused(self, sent: _SentEntry, exc: RecordTooLargeError) -> None:
        """A bookie refused an entry of ``sent.ledger`` as too large: its ledger writer
        stopped, failing ``sent`` and every later entry with ``exc``, and the ledger is
        closed at its last acknowledged entry. Make no entry larger than the bookie's limit
        from now on, pack the records of those entries again, with the ones held or batched
        since, and hold them for the next ledger (:meth:`_resend`); roll to it."""
        ledger = sent.ledger
        refused = [sent]
        undelivered = self._undelivered
        while undelivered and undelivered[0].ledger is ledger and undelivered[0].entry.done():
            later = undelivered[0].entry
            if later.cancelled() or not isinstance(later.exception(), RecordTooLargeError):
                break
            refused.append(undelivered.popleft())
        self._refused = ledger
        log.warning("bookie refused an entry as too large", log=self.name, error=str(exc))
        limit = exc.limit
        if limit is not None and HEADER_BYTES + RECORD_OVERHEAD_BYTES < limit < self._entry_bytes:
            self._entry_bytes = limit
            self._resend([(each.payload, each.sinks) for each in refused], exc)
        else:
            # No smaller limit to pack them within (the bookie did not say, or it holds no
            # record): sent again, they would be refused again.
            error = RecordTooLargeError(
                f"log {self.name!r}: not appended, with every record of ledger "
                f"{ledger.ledger_id} not yet acknowledged: {exc}; the writer goes on in a "
                f"new ledger with entries of at most {self._entry_bytes} bytes",
                size=exc.size,
                limit=exc.limit,
            )
            error.__cause__ = exc
            for each in refused:
                self._fail_futures(each.sinks, error)
        if ledger is self._current:
            self._maybe_roll()

    def _session_expired(self) -> None:
        """The session that took the log over is gone: another writer may hold the log by
        now, so stop (appends not yet acknowledged fail; an acknowledged one is on Qa
        bookies of its ledger, which any takeover's recovery keeps)."""
        if self._failure is not None or self._closed:
            return
        error = SessionExpiredError(
            f"log {self.name!r}: the metadata session that made this process the writer "
            "expired; another writer may have taken the log over, so this one stops "
            "(open a new writer to continue)"
        )
        self._fail(error)
        for ledger in (self._current, *self._old.retiring):
            ledger.writer.abort(error)

    def _fail(self, exc: BaseException) -> None:
        """End the writer: the first failure is what every later call raises."""
        if self._failure is None:
            self._failure = exc
            self._stop_watching_session()
            log.warning("log writer failed", log=self.name, error=str(exc))
            if self.registration is not None:
                self.registration.end()
        if self._batch_futures:
            futures, self._batch_futures = self._batch_futures, []
            self._batch = self._new_batch()
            self._fail_futures(futures, self._failure)
        while self._held:
            self._fail_futures(self._held.popleft()[2], self._failure)

    @staticmethod
    def _fail_futures(futures: list[PositionSink], exc: BaseException) -> None:
        for future in futures:
            if not future.done():
                future.set_exception(exc)

    # -- rolling ---------------------------------------------------------------------------

    def _activate(self, ledger: LedgerWriterLike) -> ActiveLedger:
        active = ActiveLedger(ledger)
        if self._age_timer is not None:
            self._age_timer.cancel()
        if self._roll_policy.max_age is not None:
            # An idle ledger still rolls on age; an empty one rolls with its first entry.
            self._age_timer = self._loop.call_later(self._roll_policy.max_age, self._maybe_roll)
        return active

    def _maybe_roll(self) -> None:
        if self._roll_task is not None or self._failure is not None or self._closed:
            return
        if self._loop.time() < self._roll_retry_at:
            # The last roll failed (e.g. too few bookies): do not retry per entry, but do
            # once the pause is over, even if no record comes by then.
            if self._roll_retry is None:
                self._roll_retry = self._loop.call_at(self._roll_retry_at, self._retry_roll)
            return
        led = self._current
        age = time.monotonic() - led.started
        if led is self._refused or self._roll_policy.should_roll(
            entries=led.entries, size_bytes=led.size_bytes, age=age
        ):
            self._roll_task = asyncio.create_task(self._roll())

    def _retry_roll(self) -> None:
        self._roll_retry = None
        self._maybe_roll()

    async def roll(self) -> None:
        """Close the current ledger and continue in a new one now: returns once records go
        to a ledger other than the one current at the call. A roll under way is joined; one
        that had switched already (and is closing the old ledger) is followed by another,
        unless nothing was appended since: like a roll policy, ``roll()`` never rolls an
        empty ledger (every record appended before the call is in an earlier one already).

        Once records go to the new ledger the roll has succeeded, even if closing the old
        one fails (it is then closed by recovery in the background) or the writer closes
        meanwhile.

        Raises:
            WriterFencedError: another writer took over.
            LedgerClosedError: the writer was closed before the roll switched.
            WalogError: the roll failed (e.g. NotEnoughBookiesError); the writer goes on
                in its current ledger.
        """
        current = self._current
        if not (current.entries or self._held or self._batch_futures):
            self._check_usable()
            return  # nothing went to (or waits for) the current ledger: an empty ledger
        while self._current is current:
            if self._roll_task is None:
                self._check_usable()
                self._roll_task = asyncio.create_task(self._roll())
            error = await asyncio.shield(self._roll_task)
            if error is not None and self._current is current:
                raise error

    async def wait_retention(self) -> None:
        """Wait until what runs after this writer's rolls (its retention) has run: rolls
        under way finish first (each asks for a run once it has closed its old ledger),
        then no run is under way or asked for. Never raises a roll's error."""
        while (task := self._roll_task) is not None:
            await asyncio.wait({task})
        if self.after_roll is not None:
            await self.after_roll.wait_idle()

    async def _roll(self) -> BaseException | None:
        """Roll once; return the error of a failed roll (the writer keeps its ledger)."""
        error: BaseException | None = None
        try:
            old = self._current
            new_writer = await create_log_ledger(self._client, self.name, self._options)
            early = mutations.enabled("roll_acks_before_listing")
            if early:  # the planted bug: records reach the new ledger before the list has it
                self._current = self._activate(new_writer)
                await self._old.retire(old)
            try:
                if self._failure is not None:  # e.g. the session expired meanwhile
                    raise self._failure
                await update_log(
                    self._client.ctx.store,
                    self.name,
                    lambda meta: self._append_ledger(meta, old.ledger_id, new_writer.ledger_id),
                )
            except BaseException as exc:
                await discard_unlisted_after(self._client, self.name, new_writer.ledger_id, exc)
                raise
            if not early:
                self._current = self._activate(new_writer)
            log.info("log rolled", log=self.name, old=old.ledger_id, new=new_writer.ledger_id)
            if not early:
                await self._old.retire(old)
            if self.after_roll is not None and self._failure is None:
                self.after_roll.rolled()
        except WriterFencedError as exc:
            self._fail(exc)
            error = exc
        except Exception as exc:  # a failed roll keeps the old ledger; a later roll retries
            log.warning("log roll failed", log=self.name, error=str(exc))
            self._roll_retry_at = self._loop.time() + ROLL_RETRY_SECONDS
            error = exc
        finally:
            self._roll_task = None
        self._release_held()  # what waited for the old ledger's close (VOLATILE)
        # A limit reached while this roll was under way started no roll (the age timer fires
        # once): the next one starts now, even if no record comes. Not from a roll cancelled
        # or closed with its loop: no new task then.
        self._maybe_roll()
        return error

    def _append_ledger(
        self, meta: LogMetadata, expected_last: int, new_id: int
    ) -> LogMetadata | None:
        if applied(meta, self.epoch, new_id):
            return None  # this roll's own CAS, applied although its answer was lost
        if meta.epoch != self.epoch or meta.last_ledger_id != expected_last:
            raise fenced(self.name, expected_last, MetadataConflictError("ledger list changed"))
        # The producer table goes forward with the ledger list (walog.log.sessions).
        table = meta.producers if self.sessions is None else self.sessions.doc(self._last_stamp)
        return meta.replace(ledgers=(*meta.ledgers, LedgerInfo(new_id)), producers=table)

    # -- closing ---------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncLogWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Flush, close the current ledger and record its end. Safe to call twice: every
        call returns once that is done, and a caller cancelled while it waits leaves the
        close going on.

        Appends made after close() began are refused. A fenced writer closes quietly: its
        ledgers belong to the new writer's recovery.
        """
        if self._close_task is None:
            self._closed = True  # no new records, no new automatic rolls
            self._stop_watching_session()
            self._close_task = self._loop.create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._old.closing()
        if self.after_roll is not None:
            await self.after_roll.stop()  # its work is not the writer's to finish
        try:
            if self._failure is None:
                # The close below forces a VOLATILE ledger.
                await self._drain(recoveries=True)
                if self._roll_task is not None:  # a roll under way when close began
                    await asyncio.shield(self._roll_task)
        except WalogError as exc:
            while self._held:  # held for a ledger the writer could not roll to
                self._fail_futures(self._held.popleft()[2], exc)
        for timer in (self._age_timer, self._roll_retry):
            if timer is not None:
                timer.cancel()
        if self._failure is None:
            await self._old.close(self._current)
        try:
            await self._old.finish()
        finally:
            if self.registration is not None:
                await self.registration.end()


async def open_log_writer(
    client: LedgerClientLike,
    name: str,
    options: LedgerOptions,
    roll_policy: RollPolicy,
    config: LogWriterConfig,
    producer: str | None = None,
    *,
    sessions: bool = False,
) -> AsyncLogWriter:
    """Take over as the writer of log ``name`` (docs/protocol.md, "Takeover"), with the
    session of ``producer`` when given (docs/logs.md, "Producer sessions"); ``sessions``
    without a producer: the records name theirs (``append_as``, the state machine's).
    Either way the producer table is rebuilt before the writer takes any record.

    Raises:
        NoSuchLogError: the log does not exist.
        ValueError: ``config.max_entry_bytes`` is over the client's limit or the one an
            available bookie announces (walog.log.entry_limit); nothing was changed; or
            ``producer`` is not a name a record can carry.
        TypeError: ``producer`` is not a ``str``.
        MetadataConflictError: other writers kept winning the CAS (duel) for too long.
    """
    if producer is not None:
        producer_prefix(producer)  # checked before anything changes
    await check_entry_limit(client, name, config.max_entry_bytes)
    writer, stored = await _take_over(client, name, options, roll_policy, config)
    try:
        if producer is not None or sessions:
            writer.sessions = await start_sessions(client, name, stored, options.password)
            writer.producer = producer
    except BaseException:
        await writer.close()
        raise
    try:
        # Visible to `walog log show` and `walog status` while it lives.
        writer.registration = await register_writer(client.ctx.store, name, writer.epoch)
    except BaseException:
        await writer.close()
        raise
    return writer


async def _take_over(
    client: LedgerClientLike,
    name: str,
    options: LedgerOptions,
    roll_policy: RollPolicy,
    config: LogWriterConfig,
) -> tuple[AsyncLogWriter, LogMetadata]:
    async for attempt in cas_retrying(also=ListChanged):
        with attempt:
            stored, ledger = await take_over_once(client, name, options)
            try:
                stamp = await last_timestamp(client, stored, options.password)
                if mutations.enabled("takeover_ignores_last_timestamp"):
                    stamp = -math.inf
            except BaseException:
                with contextlib.suppress(WalogError):
                    await ledger.close()
                raise
            writer = AsyncLogWriter(
                client, name, stored.epoch, ledger, options, roll_policy, config, stamp
            )
            return writer, stored
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


__all__ = ["AsyncLogWriter", "LogWriterConfig", "RollFollower", "open_log_writer"]

"""The sync log API: :class:`Log`, :class:`LogWriter`, :class:`LogReader`.

Each wraps its ``walog.log`` coroutine counterpart and runs it on the client's event loop
thread (:class:`walog._loop_thread.LoopThread`). The hot paths do not pay one thread hop per call:
appends are queued by user threads and drained by the loop in batches, the writer resolves
the callers' futures directly, and a reader fetches every record already available in one
hop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import datetime
from collections.abc import Iterable, Iterator, Mapping

from walog._loop_thread import Handoff, LoopThread, SyncContext
from walog._sinks import Sink
from walog.log.async_log import AsyncLog
from walog.log.barrier import DEFAULT_BARRIER_TIMEOUT_S
from walog.log.entry_limit import record_too_large
from walog.log.lag import ReaderLag
from walog.log.log_config import LogConfig
from walog.log.log_metadata import DamagedField, LogMetadata
from walog.log.position import Position, Record, Segment
from walog.log.reader import AsyncLogReader, StartAt
from walog.log.records import HEADER_BYTES, RECORD_OVERHEAD_BYTES, check_seq, record_bytes
from walog.log.registration import WriterInfo
from walog.log.sessions import no_producer
from walog.log.subscriptions import SubscriptionInfo
from walog.log.writer import AsyncLogWriter, LogWriterConfig
from walog.metadata import election


class LogWriter(SyncContext):
    """The log's single writer (a context manager: ``close()`` on exit).

    Made by :meth:`Log.open_writer`. Once another writer takes over, every call raises
    :class:`walog.WriterFencedError`.

    Attributes:
        async_writer: the underlying :class:`walog.log.writer.AsyncLogWriter`.
    """

    def __init__(self, writer: AsyncLogWriter, loop: LoopThread, config: LogWriterConfig) -> None:
        self.async_writer = writer
        self._loop = loop
        self._max_entry_bytes = config.max_entry_bytes
        self._max_payload = config.max_entry_bytes - HEADER_BYTES - RECORD_OVERHEAD_BYTES
        # The async writer resolves each future itself when its entry completes: no asyncio
        # future, callback or thread hop per record. A producer's records go as (data, seq).
        submit = writer.append_into if writer.producer is None else self._submit_tagged
        self._handoff: Handoff[Position] = Handoff(loop, submit)
        self._put = self._handoff.put

    def _submit_tagged(self, item: tuple[bytes, int | None], sink: Sink[Position]) -> None:
        self.async_writer.append_into(item[0], sink, item[1])

    @property
    def producer(self) -> str | None:
        """The producer whose session this writer's records belong to (None: none)."""
        return self.async_writer.producer

    @property
    def name(self) -> str:
        """The log's name."""
        return self.async_writer.name

    def append_async(
        self, data: bytes | bytearray | memoryview, seq: int | None = None
    ) -> concurrent.futures.Future[Position]:
        """Queue a record; the future resolves with its position once it is durable. With a
        producer, ``seq`` numbers the record (None: the last + 1), and a seq the log holds
        resolves with its first position (docs/logs.md, "Producer sessions").

        Raises:
            TypeError: ``data`` is a ``str`` or not bytes-like, or ``seq`` not an int.
            ValueError: ``seq`` is negative.
            SequenceError: ``seq`` given to a writer without a producer. A seq skipped or
                too old fails the future with it (``SequenceTooOldError``).
            RecordTooLargeError: the record cannot fit in one entry (a ``ValueError``);
                the writer goes on.
        """
        if type(data) is not bytes or len(data) > self._max_payload:
            data = self._payload(data)  # copied, checked, or refused
        if self.async_writer.producer is None:
            if seq is not None:
                raise no_producer(self.name, seq)
            return self._put(data)
        return self._put((data, None if seq is None else check_seq(seq)))

    def _payload(self, data: bytes | bytearray | memoryview) -> bytes:
        payload = data if type(data) is bytes else record_bytes(data)
        if len(payload) > self._max_payload:
            raise record_too_large(self.name, len(payload), self._max_entry_bytes)
        return payload

    def append(self, data: bytes | bytearray | memoryview, seq: int | None = None) -> Position:
        """Append a record; return its position once it is durable (its entry acked);
        ``seq`` as for :meth:`append_async`."""
        return self.append_async(data, seq).result()

    def append_many_async(
        self,
        records: Iterable[bytes | bytearray | memoryview],
        seqs: Iterable[int | None] | None = None,
    ) -> concurrent.futures.Future[list[Position]]:
        """Queue ``records`` in order with one future for all of them: it resolves with
        their positions once every one is durable, or fails with the first failure (records
        before the failed one may be durable, as with :meth:`append_async`). One hand-over
        to the event loop and one future for the whole batch: the fast way to append many
        records from a thread.

        With a producer, ``seqs`` (one per record) number them as :meth:`append_async`'s
        ``seq`` does; None numbers each one the last + 1.

        Raises:
            TypeError: a record is a ``str`` or not bytes-like, or a seq not an int
                (nothing is appended).
            ValueError: a record cannot fit in one entry, a seq is negative, or ``seqs``
                does not have one seq per record (nothing is appended).
            SequenceError: ``seqs`` given to a writer without a producer.
        """
        payloads = [self._payload(data) for data in records]
        if self.async_writer.producer is None:
            if seqs is not None:
                raise no_producer(self.name, seqs)
            return self._handoff.put_many(payloads)
        numbers = [None] * len(payloads) if seqs is None else list(seqs)
        if len(numbers) != len(payloads):
            raise ValueError(f"{len(numbers)} seqs for {len(payloads)} records")
        checked = [None if seq is None else check_seq(seq) for seq in numbers]
        return self._handoff.put_many(list(zip(payloads, checked, strict=True)))

    def append_many(
        self,
        records: Iterable[bytes | bytearray | memoryview],
        seqs: Iterable[int | None] | None = None,
    ) -> list[Position]:
        """Append ``records`` in order; return their positions once every one is durable
        (``seqs`` as for :meth:`append_many_async`)."""
        return self.append_many_async(records, seqs).result()

    def wait_retention(self) -> None:
        """Wait until the retention this writer applies after its rolls has run (no run
        under way or asked for); a roll under way finishes first."""
        self._loop.run(self.async_writer.wait_retention())

    def flush(self) -> None:
        """Wait until every record appended so far is durable."""
        self._loop.run(self._after_drain_flush())

    def roll(self) -> None:
        """Close the current ledger and continue in a new one; returns once records go to a
        ledger other than the one current at the call."""
        self._loop.run(self._after_drain_roll())

    def close(self) -> None:
        """Flush and close the current ledger (quietly, if another writer took over)."""
        self._loop.run(self._after_drain_close())

    async def _after_drain_flush(self) -> None:
        self._handoff.drain()  # records queued before this call go first
        await self.async_writer.flush()

    async def _after_drain_roll(self) -> None:
        self._handoff.drain()
        await self.async_writer.roll()

    async def _after_drain_close(self) -> None:
        self._handoff.drain()
        await self.async_writer.close()


class LogReader(SyncContext):
    """A tailing reader (a context manager and an iterator; iteration blocks while tailing).

    Never fences the writer. Made by :meth:`Log.open_reader`.

    Attributes:
        async_reader: the underlying :class:`walog.log.reader.AsyncLogReader`.
    """

    def __init__(self, reader: AsyncLogReader, loop: LoopThread) -> None:
        self.async_reader = reader
        self._loop = loop
        self._ready: collections.deque[Record] = collections.deque()

    def read_next(self, timeout: float | None = None) -> Record | None:
        """The next record, waiting up to ``timeout`` seconds (None: wait); None on timeout.

        Raises:
            DataLossError: the next record was truncated.
        """
        if not self._ready:
            self._ready.extend(self._loop.run(self.async_reader.read_available(timeout)))
        return self._ready.popleft() if self._ready else None

    def __iter__(self) -> Iterator[Record]:
        while True:
            record = self.read_next()
            if record is not None:
                yield record

    @property
    def subscription(self) -> str | None:
        """The subscription this reader reads for, or None."""
        return self.async_reader.subscription

    def commit(self, position: Position | str | None = None) -> Position | None:
        """Record that this reader's subscription consumed every record before
        ``position`` (default: every record this reader returned); return the position
        committed (None: nothing to commit yet). See
        :meth:`walog.log.reader.AsyncLogReader.commit`."""
        if position is None and self._ready:
            position = self._ready[0].position  # fetched, not returned yet
        return self._loop.run(self.async_reader.commit(position))

    def lag(self) -> ReaderLag:
        """How far this reader trails the log's end as the bookies confirm it now:
        ``entries_behind`` and ``caught_up`` (what a warm standby checks)."""
        position = self._ready[0].position if self._ready else self.async_reader.position
        return self._loop.run(self.async_reader.lag_from(position))

    def close(self) -> None:
        """Stop reading; a read_next() waiting in another thread raises RuntimeError."""
        self._loop.run(self.async_reader.close())


class Leadership:
    """One term of leadership of a log's election, won by :meth:`Log.elect`.

    A suggestion, not a lock: take the log over with :meth:`Log.open_writer` (which fences
    any earlier writer) and step down once :meth:`wait_lost` returns True.

    Attributes:
        async_leadership: the underlying :class:`walog.metadata.election.Leadership`.
    """

    def __init__(self, term: election.Leadership, loop: LoopThread) -> None:
        self.async_leadership = term
        self._loop = loop

    @property
    def candidate_id(self) -> str:
        """This candidate."""
        return self.async_leadership.candidate_id

    @property
    def epoch(self) -> int:
        """Strictly larger than the epoch of every earlier term of the election."""
        return self.async_leadership.epoch

    @property
    def is_leader(self) -> bool:
        """True until the term is known to be over."""
        return self.async_leadership.is_leader

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the term is over (True) or ``timeout`` seconds passed (False)."""
        term = self.async_leadership

        async def wait() -> bool:
            try:
                async with asyncio.timeout(timeout):
                    await term.wait_lost()
            except TimeoutError:
                return False
            return True

        return self._loop.run(wait())

    def resign(self) -> None:
        """End the term now and let another candidate win."""
        self._loop.run(self.async_leadership.resign())


class Log:
    """A named log: an ordered list of ledgers. Made by ``Client.open_log``.

    Attributes:
        async_log: the underlying :class:`walog.log.async_log.AsyncLog`.
    """

    def __init__(self, log: AsyncLog, loop: LoopThread) -> None:
        self.async_log = log
        self._loop = loop

    @property
    def name(self) -> str:
        """The log's name."""
        return self.async_log.name

    @property
    def loop_thread(self) -> LoopThread:
        """The event loop thread the log's coroutines run on."""
        return self._loop

    @property
    def config(self) -> LogConfig:
        """The settings this process uses for the log (those stored with it)."""
        return self.async_log.config

    def stored_config(self) -> LogConfig:
        """The settings stored with the log now (see ``AsyncLog.stored_config``)."""
        return self._loop.run(self.async_log.stored_config())

    def configure(self, changes: Mapping[str, object]) -> LogConfig:
        """Change settings stored with the log by key, in one compare-and-swap; return the
        settings now stored (see ``AsyncLog.configure``)."""
        return self._loop.run(self.async_log.configure(changes))

    def segments(self) -> list[Segment]:
        """The log's ledgers, oldest first."""
        return self._loop.run(self.async_log.segments())

    def metadata(self) -> LogMetadata:
        """The log's metadata record as stored now."""
        return self._loop.run(self.async_log.metadata())

    def open_writer(
        self, config: LogWriterConfig | None = None, *, producer: str | None = None
    ) -> LogWriter:
        """Take over as the log's writer: fence and recover the last two ledgers, create a
        new one and CAS-write the ledger list. Any earlier writer's next append fails with
        :class:`walog.WriterFencedError`.

        With ``producer``, the writer's records belong to that producer's session: a seq
        the log holds already returns its first position instead of being written again,
        across rolls and takeovers (docs/logs.md, "Producer sessions").

        Raises:
            ValueError: ``producer`` is empty or longer than 255 bytes of UTF-8.
            TypeError: ``producer`` is not a ``str``.
        """
        config = self.async_log.writer_config_for(config)
        writer = self._loop.run(self.async_log.open_writer(config, producer=producer))
        return LogWriter(writer, self._loop, config)

    def open_reader(
        self,
        start: StartAt = "earliest",
        *,
        subscription: str | None = None,
        at: datetime.datetime | float | None = None,
    ) -> LogReader:
        """A tailing reader from ``"earliest"``, ``"latest"`` or a :class:`walog.Position`,
        or with ``at`` (a datetime with a time zone, or seconds since the epoch) from the
        first record at or after that time (:meth:`position_at`; the log's end when there
        is none); with ``subscription``, from after what that subscription committed
        (``start`` or ``at`` applies only to one that never committed).

        Raises:
            ValueError: both ``start`` and ``at`` given; a naive datetime.
            TypeError: ``at`` is neither a datetime nor a number.
        """
        reader = self._loop.run(self.async_log.open_reader(start, subscription=subscription, at=at))
        return LogReader(reader, self._loop)

    def position_at(self, at: datetime.datetime | float) -> Position | None:
        """The position of the first record whose timestamp is at or after ``at`` (a
        datetime with a time zone, or seconds since the epoch), None when every record is
        before it; at most ``ceil(log2(entries)) + 2`` entry reads per ledger it looks
        into, archived ranges answered from the archive (docs/time.md).

        Raises:
            ValueError: a naive datetime, or a number that is not finite.
            TypeError: ``at`` is neither a datetime nor a number.
        """
        return self._loop.run(self.async_log.position_at(at))

    def subscriptions(self) -> list[SubscriptionInfo]:
        """The log's subscriptions with their positions and how far behind they are."""
        return self._loop.run(self.async_log.subscriptions())

    def read_barrier(self, *, timeout: float = DEFAULT_BARRIER_TIMEOUT_S) -> Position:
        """A position ``p`` such that every record acknowledged before this call began
        lies before ``p`` and every record before ``p`` is readable once it returned, as
        :meth:`walog.aio.AsyncLog.read_barrier` (docs/linearizable-reads.md).

        Raises:
            ValueError: ``timeout`` is negative.
            BookieUnavailableError: too few bookies of the last ledger answered.
            TimeoutError: the last add confirmed did not reach what the bookies store
                within ``timeout`` seconds.
        """
        return self._loop.run(self.async_log.read_barrier(timeout=timeout))

    def writer(self) -> WriterInfo | None:
        """The log's live writer (host, pid, epoch, start time), None when none writes."""
        return self._loop.run(self.async_log.writer())

    def truncate(self, before: Position | str) -> int:
        """Delete the ledgers whose every record is before ``before`` (a Position or text
        ``"LEDGER:ENTRY:SLOT"``); return how many.

        Never deletes the ledger being written. A point past the log's end (just after
        the last entry readers can see now: the last add confirmed of the ledger being
        written) is refused, as by :meth:`walog.aio.AsyncLog.truncate`.

        Raises:
            TypeError: ``before`` is neither a Position nor text.
            ValueError: ``before`` is text that does not parse, or lies past the log's end
                (nothing is deleted then).
        """
        return self._loop.run(self.async_log.truncate(before))

    def enforce_retention(self) -> int:
        """Apply the log's RetentionPolicy; return how many ledgers it deleted."""
        return self._loop.run(self.async_log.enforce_retention())

    def collect_orphans(self) -> int:
        """Delete ledgers an interrupted truncation left pending deletion."""
        return self._loop.run(self.async_log.collect_orphans())

    def commit_cursor(self, consumer: str, position: Position | str | None) -> None:
        """Record that ``consumer`` consumed every record before ``position`` (a Position or
        text ``"LEDGER:ENTRY:SLOT"``; None removes the cursor).

        Raises:
            TypeError: ``consumer`` is not text, or ``position`` not a Position, text or None.
            ValueError: ``consumer`` is empty, or ``position`` does not parse or lies in a
                ledger past the log's newest.
        """
        self._loop.run(self.async_log.commit_cursor(consumer, position))

    def mark_archived(self, position: Position | str) -> None:
        """Record that every record before ``position`` (a Position or text) is archived.

        Raises:
            TypeError: ``position`` is neither a Position nor text.
            ValueError: ``position`` does not parse or lies in a ledger past the log's newest.
        """
        self._loop.run(self.async_log.mark_archived(position))

    def elect(
        self, candidate_id: str, *, election: str | None = None, timeout: float | None = None
    ) -> Leadership:
        """Campaign to be this log's writer; return once ``candidate_id`` leads (the
        election is ``log-<name>`` unless named).

        Raises:
            TimeoutError: it did not lead within ``timeout`` seconds (campaigning stops).
            ValueError: ``candidate_id`` or ``election`` is empty or contains ``/``.
        """
        try:
            term = self._loop.run(self.async_log.elect(candidate_id, election=election), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"{candidate_id!r} did not win election "
                f"{self.async_log.election_name(election)!r} within {timeout} seconds"
            ) from None
        return Leadership(term, self._loop)

    def current_leader(self, *, election: str | None = None) -> tuple[str, int] | None:
        """``(candidate_id, epoch)`` of the candidate leading this log's election now, or
        None while nobody leads.

        Raises:
            walog.NewerFormatError: the leader record is of a newer format version.
        """
        return self._loop.run(self.async_log.current_leader(election=election))

    def repair(self) -> list[DamagedField]:
        """Remove the fields of the log's record that do not parse (``metadata().damaged``);
        return them. Nothing else of the record changes."""
        return self._loop.run(self.async_log.repair())


__all__ = ["Leadership", "Log", "LogReader", "LogWriter"]

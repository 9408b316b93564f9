"""A log writer's producer sessions: admitting tagged records, and rebuilding the table at a
takeover (docs/logs.md, "Producer sessions").

The rules of a producer's seqs are walog.log.producers' (pure); this module applies them to
one writer's appends and reads the records a takeover has to fold into the stored table:
those after the position the table covers, in the ledgers the list holds (every one CLOSED
once the takeover's CAS stored the list). A log whose record holds no table (one written
only by writers without producers, or by a release before producer sessions) is rebuilt
from the last two ledgers before the new one: those the takeover recovered.
"""

from __future__ import annotations

import contextlib
from typing import Any

from walog._loggers import get_logger
from walog._sinks import ALREADY_SETTLED, Sink
from walog.errors import NoSuchLedgerError, SequenceError
from walog.log.damaged import without
from walog.log.ledgers import LedgerClientLike
from walog.log.log_metadata import LedgerInfo, LogMetadata, update_log
from walog.log.position import Position
from walog.log.producers import ProducerState, ProducerTable
from walog.log.records import MAX_SEQ, check_seq, iter_tagged_views, producer_prefix

log = get_logger(__name__)

READ_CHUNK_ENTRIES = 256
"""Entries a takeover reads at once while it rebuilds the table."""

PositionSink = Sink[Position]


class Tracked:
    """The sink of a record of a producer in a writer's batch: records where it landed
    in the producer's window, then answers its caller and every append of the same seq
    that joined it. Kept lean: it runs once per record (in flight while its seq is one of
    its producer's pending ones)."""

    __slots__ = ("_sessions", "producer", "seq", "sink", "state")

    def __init__(
        self,
        sessions: Sessions,
        producer: str,
        seq: int,
        sink: PositionSink,
        state: ProducerState,
    ) -> None:
        self._sessions = sessions
        self.producer = producer
        self.seq = seq
        self.sink = sink
        self.state = state

    def done(self) -> bool:
        """True once its entry completed (or failed)."""
        return self.seq not in self.state.pending

    def set_result(self, position: Position, /) -> None:
        """The record is acknowledged at ``position``."""
        seq, state = self.seq, self.state
        pending = state.pending
        if seq not in pending:
            return
        pending.remove(seq)
        sessions = self._sessions
        state.remember(seq, position, sessions.window)
        try:  # noqa: SIM105 (suppress() would cost a context manager per record)
            self.sink.set_result(position)
        except ALREADY_SETTLED:
            pass  # its caller cancelled it
        if sessions.joined:
            for sink in sessions.joined.pop((self.producer, seq), ()):
                with contextlib.suppress(*ALREADY_SETTLED):
                    sink.set_result(position)

    def set_exception(self, exception: BaseException, /) -> None:
        """The record did not go to the log (or the writer failed: it may have)."""
        if self.seq not in self.state.pending:
            return
        self.state.pending.remove(self.seq)
        joined = self._sessions.joined.pop((self.producer, self.seq), [])
        for sink in (self.sink, *joined):
            if not sink.done():
                sink.set_exception(exception)


class Sessions:
    """The producer sessions of one writer: its table and the appends in flight.

    Args:
        table: the table as the takeover rebuilt it.

    Attributes:
        joined: (producer, seq) -> the sinks of appends of a seq in flight that wait for
            its first append's outcome.
    """

    def __init__(self, table: ProducerTable) -> None:
        self.table = table
        self.window = table.window
        self._states = table.states
        self._prefixes: dict[str, bytes] = {}
        self.joined: dict[tuple[str, int], list[PositionSink]] = {}

    def prefix(self, producer: str) -> bytes:
        """The producer's name as records carry it (checked once per producer).

        Raises:
            TypeError, ValueError: not a name a record can carry.
        """
        prefix = self._prefixes.get(producer)
        if prefix is None:
            prefix = self._prefixes[producer] = producer_prefix(producer)
        return prefix

    def admit(
        self, producer: str, seq: int | None, sink: PositionSink, stamp: float
    ) -> Tracked | None:
        """Decide about an append of ``producer`` with ``seq``: a :class:`Tracked` sink to
        write it with, or None when ``sink`` was answered with the position the log holds
        it at, or joined the append of the same seq in flight.

        Raises:
            TypeError: ``seq`` is not an int.
            ValueError: ``seq`` is negative.
            SequenceError: ``seq`` was skipped, or is too old (SequenceTooOldError).
        """
        state = self._states.get(producer)
        if state is not None and seq is None:  # the path of every record numbered here
            seq = state.last_seq + 1
            if seq <= MAX_SEQ:
                state.last_seq = seq
                state.pending.add(seq)
                state.stamp = stamp
                return Tracked(self, producer, seq, sink, state)
        if seq is not None and (type(seq) is not int or not 0 <= seq <= MAX_SEQ):
            check_seq(seq)  # raises, naming the problem
        taken = self.table.take(producer, seq, stamp)
        if taken is not None:
            state, seq = taken
            if seq > MAX_SEQ:  # numbered by the writer past what a record carries
                self.table.failed(producer, seq)
                check_seq(seq)
            return Tracked(self, producer, seq, sink, state)
        kind, seq, position = self.table.admit(producer, seq)
        if kind == "written":
            assert position is not None
            sink.set_result(position)
        else:  # in flight: answered with the first one's outcome
            self.joined.setdefault((producer, seq), []).append(sink)
        return None

    def doc(self, now: float) -> dict[str, Any]:
        """The table as the log's record keeps it (``now``: the writer's last timestamp)."""
        return self.table.to_doc(now)

    def entry_acked(self, ledger_id: int, entry_id: int, records: int) -> None:
        """Every record up to entry ``entry_id`` of ``ledger_id`` is in the table."""
        self.table.last = Position(ledger_id, entry_id, records - 1)


def no_producer(name: str, seq: object) -> SequenceError:
    """The error of a seq given to a writer that has no producer."""
    return SequenceError(
        f"log {name!r}: seq={seq!r} given, but this writer has no producer: open it with "
        "open_writer(producer=...) to append with seqs"
    )


def tail_to_scan(meta: LogMetadata, last: Position | None) -> list[tuple[LedgerInfo, int]]:
    """The ledgers of ``meta`` (as a takeover stored it: the new ledger last) whose records
    a takeover folds into a table that covers the log up to ``last``, each with the first
    entry to read (pure). ``last`` None: the two ledgers before the new one."""
    closed = meta.ledgers[:-1]
    if last is None:
        return [(info, 0) for info in closed[-2:]]
    out: list[tuple[LedgerInfo, int]] = []
    for info in closed:
        if info.ledger_id == last.ledger_id:
            out.append((info, last.entry_id + 1))
        elif info.ledger_id > last.ledger_id:
            out.append((info, 0))
    return out


async def rebuild(client: LedgerClientLike, meta: LogMetadata, password: bytes) -> ProducerTable:
    """The producer table of the log ``meta`` describes, right after a takeover stored
    ``meta``: the stored table plus the records after the position it covers.

    Raises:
        WalogError: a ledger could not be read (the takeover fails; a new one retries).
    """
    table = _stored(meta)
    for info, first in tail_to_scan(meta, table.last):
        if not info.is_closed or first > info.last_entry_id:
            continue
        try:
            reader = await client.open_ledger(info.ledger_id, recovery=False, password=password)
        except NoSuchLedgerError:
            continue  # deleted by retention meanwhile: its records are gone from the log
        try:
            while first <= info.last_entry_id:
                last = min(first + READ_CHUNK_ENTRIES - 1, info.last_entry_id)
                for entry in await reader.read(first, last):
                    slot = -1
                    for slot, (stamp, _data, tag) in enumerate(iter_tagged_views(entry.data)):
                        if tag is not None:
                            where = Position(entry.ledger_id, entry.entry_id, slot)
                            table.written(tag[0], tag[1], where, stamp)
                    table.last = Position(entry.ledger_id, entry.entry_id, slot)
                first = last + 1
        finally:
            await reader.close()
    log.info("producer table rebuilt", producers=len(table), last=str(table.last))
    return table


async def start_sessions(
    client: LedgerClientLike, name: str, meta: LogMetadata, password: bytes
) -> Sessions:
    """The sessions of the writer whose takeover stored ``meta``: the table rebuilt
    (:func:`rebuild`), then stored in the log's record at once (CAS, while the epoch is
    still the writer's), so that the next takeover reads only what comes after it even
    when this writer never rolls."""
    table = await rebuild(client, meta, password)
    sessions = Sessions(table)
    doc = sessions.doc(table.newest_stamp())

    def mutate(fresh: LogMetadata) -> LogMetadata | None:
        if fresh.epoch != meta.epoch:
            return None  # taken over meanwhile: the next append finds out
        return fresh.replace(producers=doc, damaged=without(fresh.damaged, "producers"))

    await update_log(client.ctx.store, name, mutate)
    return sessions


def _stored(meta: LogMetadata) -> ProducerTable:
    if meta.producers is None:
        return ProducerTable()
    try:
        return ProducerTable.from_doc(meta.producers)
    except ValueError as exc:  # checked when the record was read: not expected
        log.warning("stored producer table unreadable; rebuilt from the tail", error=str(exc))
        return ProducerTable()


__all__ = [
    "READ_CHUNK_ENTRIES",
    "Sessions",
    "Tracked",
    "no_producer",
    "rebuild",
    "start_sessions",
    "tail_to_scan",
]

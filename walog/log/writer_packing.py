"""How a log writer packs records into entries, beyond the plain append: records of
producer sessions (entry format 2, walog.log.sessions admits them) and the records of
entries a bookie refused as too large, packed again within its limit
(walog.log.entry_limit). Mixed into :class:`walog.log.writer.AsyncLogWriter`, whose state
it works on: it declares what it uses.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Protocol

from walog._loggers import get_logger
from walog._sinks import Sink
from walog.errors import RecordTooLargeError
from walog.log.entry_limit import record_too_large, repack, unpack
from walog.log.position import Position
from walog.log.records import (
    FORMAT_VERSION,
    TAGGED_FORMAT_VERSION,
    EntryBatch,
    new_batch,
    record_bytes,
)
from walog.log.sessions import Sessions, no_producer

log = get_logger(__name__)

PositionSink = Sink[Position]
"""Where a record's position (or its failure) goes once its entry completes."""


class _BatchSettings(Protocol):
    """What packing reads of the writer's ``LogWriterConfig``."""

    @property
    def max_records_per_entry(self) -> int: ...

    @property
    def linger(self) -> float: ...


class Packing:
    """Record packing of a log writer (see the module doc)."""

    name: str
    producer: str | None
    sessions: Sessions | None
    _config: _BatchSettings
    _loop: asyncio.AbstractEventLoop
    _clock: Callable[[], float]
    _batch: EntryBatch
    _batch_futures: list[PositionSink]
    _held: collections.deque[tuple[bytes, int, list[PositionSink]]]
    _tagged: bool
    _flush_handle: asyncio.Handle | None
    _last_stamp: float
    _entry_bytes: int
    _failure: BaseException | None
    _closed: bool

    def _check_usable(self) -> None:
        raise NotImplementedError

    def _send_batch(self) -> None:
        raise NotImplementedError

    @staticmethod
    def _fail_futures(futures: list[PositionSink], exc: BaseException) -> None:
        raise NotImplementedError

    def _new_batch(self) -> EntryBatch:
        version = TAGGED_FORMAT_VERSION if self._tagged else FORMAT_VERSION
        return new_batch(self._entry_bytes, self._config.max_records_per_entry, version)

    def _schedule_flush(self) -> None:
        if self._config.linger > 0:
            self._flush_handle = self._loop.call_later(self._config.linger, self._send_batch)
        else:
            self._flush_handle = self._loop.call_soon(self._send_batch)

    def append_as(
        self,
        producer: str | None,
        seq: int | None,
        data: bytes | bytearray | memoryview,
        sink: PositionSink,
    ) -> None:
        """``append_into`` for a record of ``producer`` with ``seq`` (None: its last + 1):
        a writer with sessions takes records of several producers this way (each command
        of the state machine names its own). Call it on the loop thread.

        Raises:
            SequenceError: the writer has no sessions, or ``seq`` was skipped or is too old.
            TypeError, ValueError: ``data`` or ``seq`` is not one a record can carry.
        """
        if self._failure is not None or self._closed:
            self._check_usable()
        if (sessions := self.sessions) is None or producer is None:
            raise no_producer(self.name, seq)
        if type(data) is not bytes:
            data = record_bytes(data)
        prefix = sessions.prefix(producer)
        batch = self._batch
        if not self._tagged or not batch.fits_tagged(len(data), prefix):
            largest = batch.max_tagged_payload_bytes(prefix)
            if len(data) > largest:
                raise record_too_large(self.name, len(data), self._entry_bytes, largest=largest)
            self._tagged = True  # from now on every entry is of format 2
            self._send_batch()
            batch = self._batch
        tracked = sessions.admit(producer, seq, sink, self._last_stamp)
        if tracked is None:
            return  # answered with the position the log holds it at, or joined the first
        self._batch_futures.append(tracked)
        self._last_stamp = stamp = max(self._clock(), self._last_stamp)
        if batch.add_tagged(stamp, data, prefix, tracked.seq):
            self._send_batch()
        elif self._flush_handle is None:
            self._schedule_flush()

    def _resend(
        self, refused: list[tuple[bytes, list[PositionSink]]], exc: RecordTooLargeError
    ) -> None:
        """Pack the records of the ``refused`` entries (bytes and sinks), then those held
        and batched since, in their order, into entries of at most the lowered limit, and
        hold them for the next ledger (the writer's ``_release_held`` sends them); fail a
        record no entry holds."""
        entries = list(refused)
        entries += [(payload, sinks) for payload, _size, sinks in self._held]
        if self._batch_futures:
            entries.append((self._batch.encode(), self._batch_futures))
        self._held.clear()
        self._batch, self._batch_futures = self._new_batch(), []
        records = unpack(entries)
        repacked = repack(records, self._entry_bytes, self._config.max_records_per_entry)
        for size, sink in repacked.too_large:
            error = record_too_large(self.name, size, self._entry_bytes, refusal=exc)
            self._fail_futures([sink], error)
        self._held.extend(repacked.entries)
        log.info(
            "records refused as too large packed again for the next ledger",
            log=self.name,
            records=len(records) - len(repacked.too_large),
            failed=len(repacked.too_large),
            max_entry_bytes=self._entry_bytes,
        )


__all__ = ["Packing", "PositionSink"]

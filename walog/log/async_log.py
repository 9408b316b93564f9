"""A log as coroutines: segments, the writer takeover, readers, truncation, retention.

``walog.aio.AsyncClient.open_log`` returns an :class:`AsyncLog`; ``walog.Log`` is its sync
facade (walog.log.sync).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Mapping

from walog._loggers import get_logger
from walog.errors import NoSuchLedgerError, WalogError
from walog.ledger.options import LedgerOptions
from walog.log import truncation
from walog.log.barrier import DEFAULT_BARRIER_TIMEOUT_S, read_barrier
from walog.log.ledgers import LedgerClientLike, delete_ledger_if_exists
from walog.log.log_config import (
    DEFAULT_CONFIG,
    LogConfig,
    effective_config,
    given_settings,
    resolve,
    stored_config,
)
from walog.log.log_metadata import (
    DamagedField,
    LogMetadata,
    commit_cursor,
    create_log,
    delete_log_record,
    list_logs,
    mark_archived,
    read_log,
    repair_log,
    update_log,
    validate_log_name,
)
from walog.log.position import Position, Segment, position_argument
from walog.log.reader import AsyncLogReader, StartAt, open_log_reader
from walog.log.registration import WriterInfo, forget_writers, live_writer
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.log.retention_runner import RetentionRunner
from walog.log.sink import collect_sink_orphans
from walog.log.subscriptions import SubscriptionInfo, subscriptions_of
from walog.log.time_search import timestamp_argument
from walog.log.time_seek import TimeAnswer, find_position
from walog.log.writer import AsyncLogWriter, LogWriterConfig, open_log_writer
from walog.metadata.election import Leadership, current_leader, elect

log = get_logger(__name__)


class AsyncLog:
    """A named log of a cluster: an ordered list of ledgers in the metadata store.

    Made by :func:`open_log` (``AsyncClient.open_log``). Holds no connection of its own:
    writers and readers it opens use the client's.
    """

    def __init__(
        self,
        client: LedgerClientLike,
        name: str,
        *,
        ledger_options: LedgerOptions,
        roll_policy: RollPolicy,
        retention: RetentionPolicy,
        writer_config: LogWriterConfig,
        config: LogConfig | None = None,
        override_config: bool = False,
    ) -> None:
        self._client = client
        self.name = name
        self.ledger_options = ledger_options
        self.roll_policy = roll_policy
        self.retention = retention
        self.writer_config = writer_config
        self.config = config or LogConfig(
            ensemble_size=ledger_options.ensemble_size,
            write_quorum=ledger_options.write_quorum,
            ack_quorum=ledger_options.ack_quorum,
            durability=ledger_options.durability,
            max_entry_bytes=writer_config.max_entry_bytes,
            roll=roll_policy,
            retention=retention,
        )
        """The settings this process uses for the log (those stored with it)."""
        self.override_config = override_config

    @property
    def client(self) -> LedgerClientLike:
        """The client this log's writers and readers use."""
        return self._client

    async def metadata(self) -> LogMetadata:
        """The log's metadata record as stored now."""
        return (await read_log(self._client.ctx.store, self.name))[0]

    async def segments(self) -> list[Segment]:
        """The log's ledgers, oldest first."""
        return [info.segment() for info in (await self.metadata()).ledgers]

    async def stored_config(self) -> LogConfig:
        """The settings stored with the log now (the defaults for a log created before logs
        kept their settings).

        Raises:
            ValueError: the stored settings do not parse (the message names the key).
        """
        return effective_config(await self.metadata())

    async def configure(self, changes: Mapping[str, object]) -> LogConfig:
        """Change settings stored with the log, by key (``{"retention.max_age": 3600}``;
        a value may be text as ``walog log config --set`` takes it), in one compare-and-swap;
        return the settings now stored. Writers opened from now on use them; the retention
        that a writer applies after its rolls, and ``walog maintain``, use them at once.

        Raises:
            ValueError: an unknown key or a value it does not take (nothing is stored).
        """
        DEFAULT_CONFIG.with_settings(changes)  # refuse a bad key or value before any I/O

        def mutate(meta: LogMetadata) -> LogMetadata | None:
            new = effective_config(meta).with_settings(changes)
            doc = new.to_doc()
            return None if doc == meta.config else meta.replace(config=doc)

        meta, _ = await update_log(self._client.ctx.store, self.name, mutate)
        return effective_config(meta)

    def writer_config_for(self, config: LogWriterConfig | None) -> LogWriterConfig:
        """``config`` (a writer's batching) within the log's entry size limit: one left at
        the default takes the log's limit, a smaller one is kept (the writer's entries, and
        so its records, are smaller).

        Raises:
            ValueError: ``config.max_entry_bytes`` exceeds the log's stored limit.
        """
        if config is None:
            return self.writer_config
        return batching_within(self.name, self.config, config, self.override_config)

    async def open_writer(
        self,
        config: LogWriterConfig | None = None,
        *,
        producer: str | None = None,
        sessions: bool = False,
    ) -> AsyncLogWriter:
        """Take over as the log's writer (fences the last two ledgers, CAS-appends a new one).

        Any earlier writer's next append fails with :class:`walog.WriterFencedError`.
        Afterwards it deletes what crashes left behind (see :meth:`collect_orphans`). After
        each roll the writer applies the log's stored retention in the background
        (:mod:`walog.log.retention_runner`; ``writer.after_roll``).

        With ``producer``, the writer's records belong to that producer's session: each
        carries a seq (``append(data, seq=n)``, or the last + 1), and a seq the log holds
        already returns its first position instead of being written again, across rolls
        and takeovers (docs/logs.md, "Producer sessions"). ``sessions`` without a producer
        lets each record name its own (``writer.append_as``, the state machine's).

        Raises:
            ValueError: ``config.max_entry_bytes`` differs from the log's stored limit, or
                ``producer`` is empty or longer than 255 bytes of UTF-8.
            TypeError: ``producer`` is not a ``str``.
        """
        writer = await open_log_writer(
            self._client,
            self.name,
            self.ledger_options,
            self.roll_policy,
            self.writer_config_for(config),
            producer,
            sessions=sessions,
        )
        writer.after_roll = RetentionRunner(
            self._client,
            self.name,
            password=self.ledger_options.password,
            fixed=self.retention if self.override_config else None,
        )
        await truncation.collect_orphans(self._client, self.name)
        await truncation.scan_orphans(self._client, self.name)
        damaged = (await self.metadata()).damaged
        if damaged:
            log.warning(
                "fields of the log's record do not parse (kept as stored; retention holds "
                "back until 'walog log repair' removes them)",
                log=self.name,
                damaged=[d.describe() for d in damaged],
            )
        return writer

    async def open_reader(
        self,
        start: StartAt = "earliest",
        *,
        subscription: str | None = None,
        at: datetime.datetime | float | None = None,
    ) -> AsyncLogReader:
        """A tailing reader from ``"earliest"``, ``"latest"`` or a position; never fences.

        With ``at`` (a datetime with a time zone, or seconds since the epoch) instead of
        ``start``, the reader starts at the first record whose timestamp is at or after it
        (:meth:`position_at`), or at the log's end when every record is before it.

        With ``subscription``, the reader resumes after what that subscription committed
        (``start`` or ``at`` applies only to a subscription that never committed), and its
        ``commit()`` records its progress.

        Raises:
            ValueError: both ``start`` and ``at`` given; a naive datetime.
            TypeError: ``at`` is neither a datetime nor a number.
        """
        if at is not None:
            if start != "earliest":
                raise ValueError(f"give start ({start!r}) or at ({at!r}), not both")
            seconds = timestamp_argument(at, "at")
            meta = await self.metadata()
            if subscription is None or subscription not in meta.cursors:
                answer = await self._find(meta, seconds)
                start = answer.position or answer.end or "earliest"
        return await open_log_reader(
            self._client,
            self.name,
            start,
            password=self.ledger_options.password,
            subscription=subscription,
        )

    async def position_at(self, at: datetime.datetime | float) -> Position | None:
        """The position of the first record whose timestamp is at or after ``at`` (a
        datetime with a time zone, or seconds since the epoch), None when every record is
        before it (docs/time.md). Timestamps compare at microsecond resolution.

        Reads the log's record, then at most ``ceil(log2(entries)) + 2`` entries of each
        ledger it looks into (a binary search over the ledgers' recorded time ranges, then
        over the entries of one ledger); ledgers moved to the archive are searched there,
        with the same answer. Never fences.

        Raises:
            ValueError: a naive datetime (say which zone: give ``tzinfo``) or a number
                that is not finite.
            TypeError: ``at`` is neither a datetime nor a number.
        """
        seconds = timestamp_argument(at, "at")
        return (await self._find(await self.metadata(), seconds)).position

    async def _find(self, meta: LogMetadata, seconds: float) -> TimeAnswer:
        return await find_position(self._client, meta, seconds, self.ledger_options.password)

    async def subscriptions(self) -> list[SubscriptionInfo]:
        """The log's subscriptions with their positions and how far behind they are
        (counting the open ledger's entries up to its last add confirmed)."""
        meta = await self.metadata()
        last = meta.ledgers[-1] if meta.ledgers else None
        confirmed = -1
        if meta.cursors and last is not None and not last.is_closed:
            with contextlib.suppress(WalogError):  # then the open ledger counts none
                handle = await self._client.open_ledger(
                    last.ledger_id, recovery=False, password=self.ledger_options.password
                )
                try:
                    confirmed = max(
                        handle.last_add_confirmed, await handle.read_last_add_confirmed()
                    )
                finally:
                    await handle.close()
        return subscriptions_of(meta, confirmed)

    async def read_barrier(self, *, timeout: float = DEFAULT_BARRIER_TIMEOUT_S) -> Position:  # noqa: ASYNC109
        """A position ``p`` such that every record acknowledged to any writer's caller
        before this call began lies before ``p``, and every record before ``p`` can be
        read once the call returned (docs/linearizable-reads.md).

        Fences nothing and asks nothing of the writer: one linearizable read of the log's
        record, one LAC read of the last ledger's bookies, and a wait for the last add
        confirmed to reach what they store. A reader that has read every record before
        ``p`` has seen every write that completed before the call.

        Raises:
            ValueError: ``timeout`` is negative.
            BookieUnavailableError: too few bookies of the last ledger answered.
            TimeoutError: the last add confirmed did not reach what the bookies store
                within ``timeout`` seconds (a writer that stalls or died, not recovered).
        """
        return await read_barrier(
            self._client, self.name, password=self.ledger_options.password, timeout=timeout
        )

    async def writer(self) -> WriterInfo | None:
        """The log's live writer (host, pid, epoch, start time), None when none writes."""
        store = self._client.ctx.store
        return await live_writer(store, self.name, await self.metadata())

    async def truncate(self, before: Position | str) -> int:
        """Delete the ledgers whose every record is before ``before`` (a Position or text
        ``"LEDGER:ENTRY:SLOT"``); return how many.

        Never deletes the ledger being written. A point past the log's end is refused:
        the end is just after the last entry readers can see now, that is the end the log's
        record gives its last ledger when CLOSED, or the last add confirmed the bookies
        give any reader when it is OPEN (entries a live writer has acknowledged but no
        reader sees yet are past it). A point exactly at the end removes every record
        written so far, but the ledger being written.

        Raises:
            TypeError: ``before`` is neither a Position nor text.
            ValueError: ``before`` is text that does not parse, or lies past the log's end
                (the error names the log's last entry and the furthest point); nothing
                is deleted then.
        """
        before = position_argument(before, "before")
        return await truncation.truncate_log(
            self._client, self.name, before, self.ledger_options.password
        )

    async def enforce_retention(self) -> int:
        """Apply the log's RetentionPolicy; return how many ledgers it deleted."""
        return await truncation.enforce_retention(
            self._client, self.name, self.retention, password=self.ledger_options.password
        )

    async def collect_orphans(self) -> int:
        """Delete ledgers an interrupted truncation left pending deletion, ledgers a
        crashed writer created but never got into the list, and sink ledgers no commit
        will link (walog.log.sink); return how many."""
        pending = await truncation.collect_orphans(self._client, self.name)
        pending += await truncation.scan_orphans(self._client, self.name)
        return pending + await collect_sink_orphans(self._client, self.name)

    async def commit_cursor(self, consumer: str, position: Position | str | None) -> None:
        """Record that ``consumer`` has consumed every record before ``position`` (a
        Position or text ``"LEDGER:ENTRY:SLOT"``; None removes the cursor). Retention keeps
        every ledger a cursor has not passed.

        Raises:
            TypeError: ``consumer`` is not text, or ``position`` not a Position, text or None.
            ValueError: ``consumer`` is empty, or ``position`` does not parse or lies in a
                ledger past the log's newest.
        """
        await commit_cursor(self._client.ctx.store, self.name, consumer, position)

    async def mark_archived(self, position: Position | str) -> None:
        """Record that every record before ``position`` (a Position or text) is archived
        (only moves forward).

        Raises:
            TypeError: ``position`` is neither a Position nor text.
            ValueError: ``position`` does not parse or lies in a ledger past the log's newest.
        """
        await mark_archived(self._client.ctx.store, self.name, position)

    def election_name(self, election: str | None = None) -> str:
        """The election of this log's writers: ``election``, by default ``log-<name>``."""
        return election or f"log-{self.name}"

    async def elect(self, candidate_id: str, *, election: str | None = None) -> Leadership:
        """Campaign to be this log's writer; return once ``candidate_id`` leads.

        Leadership is a suggestion (docs/logs.md, "Leader suggestion"): the term ends when
        the store's session does (``Leadership.lost``), and a paused process may still
        believe it leads, so the winner takes the log over with :meth:`open_writer`, which
        fences any earlier writer. Cancel the call to stop campaigning.

        Raises:
            ValueError: ``candidate_id`` or ``election`` is empty or contains ``/``.
            walog.errors.MetadataError: the store failed.
        """
        if not isinstance(candidate_id, str) or not candidate_id:
            raise ValueError(f"candidate_id must be non-empty text, got {candidate_id!r}")
        return await elect(self._client.ctx.store, self.election_name(election), candidate_id)

    async def current_leader(self, *, election: str | None = None) -> tuple[str, int] | None:
        """``(candidate_id, epoch)`` of the candidate leading this log's election now, or
        None while nobody leads.

        Raises:
            walog.NewerFormatError: the leader record is of a newer format version.
        """
        return await current_leader(self._client.ctx.store, self.election_name(election))

    async def repair(self) -> list[DamagedField]:
        """Remove the fields of the log's record that do not parse (``metadata().damaged``);
        return them. Nothing else of the record changes."""
        return await repair_log(self._client.ctx.store, self.name)


async def open_log(
    client: LedgerClientLike,
    name: str,
    *,
    ledger_options: LedgerOptions | None = None,
    roll_policy: RollPolicy | None = None,
    retention: RetentionPolicy | None = None,
    writer_config: LogWriterConfig | None = None,
    settings: Mapping[str, object] | None = None,
    password: bytes | None = None,
    override_config: bool = False,
) -> AsyncLog:
    """Open log ``name``, creating it (empty) when it does not exist.

    A new log stores the defaults with the settings given (``settings`` by key, and
    those of ``ledger_options``, ``roll_policy``, ``retention`` and a ``writer_config``'s
    ``max_entry_bytes`` that is not the default); an existing one is opened with its
    stored settings, and a given setting that differs from them is an error unless
    ``override_config`` (for tests: this process then uses its own). A ``writer_config``
    may batch in entries smaller than the log's limit, never larger.

    Raises:
        ValueError: a bad name (empty, over 200 characters, ``/``, ``..``, control chars),
            a bad setting, or a given setting that differs from the stored one.
    """
    validate_log_name(name)
    given: dict[str, object] = {}
    if ledger_options is not None:
        given.update(
            given_settings(
                ensemble_size=ledger_options.ensemble_size,
                write_quorum=ledger_options.write_quorum,
                ack_quorum=ledger_options.ack_quorum,
                durability=ledger_options.durability,
            )
        )
    given.update(given_settings(roll=roll_policy, retention=retention))
    given.update(settings or {})
    creating = dict(given)
    if writer_config is not None and writer_config.max_entry_bytes != _DEFAULT_ENTRY_BYTES:
        creating["max_entry_bytes"] = writer_config.max_entry_bytes  # a new log's limit
    new = resolve(name, None, creating)  # refuses a bad setting before anything is stored
    meta, _ = await create_log(client.ctx.store, name, new.to_doc())
    config = resolve(name, stored_config(meta), given, override=override_config)
    if password is None:
        password = ledger_options.password if ledger_options is not None else b""
    batching = batching_within(name, config, writer_config or LogWriterConfig(), override_config)
    return AsyncLog(
        client,
        name,
        ledger_options=LedgerOptions(
            config.ensemble_size,
            config.write_quorum,
            config.ack_quorum,
            config.durability,
            password,
        ),
        roll_policy=config.roll,
        retention=config.retention,
        writer_config=batching,
        config=config,
        override_config=override_config,
    )


_DEFAULT_ENTRY_BYTES = LogWriterConfig().max_entry_bytes


def batching_within(
    name: str, config: LogConfig, batching: LogWriterConfig, override: bool = False
) -> LogWriterConfig:
    """A writer's ``batching`` within log ``name``'s entry size limit (see
    :meth:`AsyncLog.writer_config_for`).

    Raises:
        ValueError: ``batching.max_entry_bytes`` exceeds the limit (unless ``override``).
    """
    limit = config.max_entry_bytes
    wanted = batching.max_entry_bytes
    if wanted == _DEFAULT_ENTRY_BYTES:
        return dataclasses.replace(batching, max_entry_bytes=limit)
    if wanted <= limit or override:
        return batching
    raise ValueError(
        f"log {name!r} stores max_entry_bytes={limit}, this writer's config gives {wanted}: "
        f"a writer's entries may not exceed the log's; change it with 'walog log config "
        f"{name} --set max_entry_bytes={wanted}'"
    )


async def create_log_with(
    client: LedgerClientLike,
    name: str,
    config: LogConfig | None = None,
    *,
    password: bytes = b"",
) -> AsyncLog:
    """Create log ``name`` storing ``config`` (None: the defaults); a log that exists with
    the same settings is opened.

    Raises:
        ValueError: a bad name, or the log exists with other settings (the message names
            them).
    """
    wanted = config or DEFAULT_CONFIG
    return await open_log(client, name, settings=wanted.settings(), password=password)


async def list_log_names(client: LedgerClientLike) -> list[str]:
    """Names of every log, sorted."""
    return await list_logs(client.ctx.store)


async def delete_log(client: LedgerClientLike, name: str, *, password: bytes = b"") -> None:
    """Delete a log and all its ledgers; a writer still appending is fenced first.

    Raises:
        NoSuchLogError: the log does not exist.
    """
    validate_log_name(name)
    meta, _ = await read_log(client.ctx.store, name)
    for info in meta.ledgers[-2:]:
        # Fence like a takeover, so no writer keeps adding to a ledger being deleted.
        with contextlib.suppress(NoSuchLedgerError):
            handle = await client.open_ledger(info.ledger_id, recovery=True, password=password)
            await handle.close()

    async def delete(ledger_id: int) -> None:
        await delete_ledger_if_exists(client, ledger_id)

    await delete_log_record(client.ctx.store, name, delete)
    await forget_writers(client.ctx.store, name)


__all__ = ["AsyncLog", "create_log_with", "delete_log", "list_log_names", "open_log"]

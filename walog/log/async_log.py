"""A log as coroutines: segments, the writer takeover, readers, truncation, retention.

``walog.aio.AsyncClient.open_log`` returns an :class:`AsyncLog`; ``walog.Log`` is its sync
facade (walog.log.sync).
"""

from __future__ import annotations

import contextlib

from walog._loggers import get_logger
from walog.errors import NoSuchLedgerError
from walog.log import truncation
from walog.log.ledgers import LedgerClientLike, delete_ledger_if_exists
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
    validate_log_name,
)
from walog.log.position import Position, Segment, position_argument
from walog.log.reader import AsyncLogReader, StartAt, open_log_reader
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.log.sink import collect_sink_orphans
from walog.log.writer import AsyncLogWriter, LedgerOptions, LogWriterConfig, open_log_writer
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
    ) -> None:
        self._client = client
        self.name = name
        self.ledger_options = ledger_options
        self.roll_policy = roll_policy
        self.retention = retention
        self.writer_config = writer_config

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

    async def open_writer(self, config: LogWriterConfig | None = None) -> AsyncLogWriter:
        """Take over as the log's writer (fences the last two ledgers, CAS-appends a new one).

        Any earlier writer's next append fails with :class:`walog.WriterFencedError`.
        Afterwards it deletes what crashes left behind (see :meth:`collect_orphans`).
        """
        writer = await open_log_writer(
            self._client,
            self.name,
            self.ledger_options,
            self.roll_policy,
            config or self.writer_config,
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

    async def open_reader(self, start: StartAt = "earliest") -> AsyncLogReader:
        """A tailing reader from ``"earliest"``, ``"latest"`` or a position; never fences."""
        return await open_log_reader(
            self._client, self.name, start, password=self.ledger_options.password
        )

    async def truncate(self, before: Position | str) -> int:
        """Delete the ledgers whose every record is before ``before`` (a Position or text
        ``"LEDGER:ENTRY:SLOT"``); return how many.

        Never deletes the ledger being written.

        Raises:
            TypeError: ``before`` is neither a Position nor text.
            ValueError: ``before`` is text that does not parse.
        """
        before = position_argument(before, "before")
        return await truncation.truncate_log(self._client, self.name, before)

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
        None while nobody leads."""
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
) -> AsyncLog:
    """Open log ``name``, creating it (empty) when it does not exist.

    Raises:
        ValueError: a bad name (empty, over 200 characters, ``/``, ``..``, control chars).
    """
    validate_log_name(name)
    await create_log(client.ctx.store, name)
    return AsyncLog(
        client,
        name,
        ledger_options=ledger_options or LedgerOptions(),
        roll_policy=roll_policy or RollPolicy(),
        retention=retention or RetentionPolicy(),
        writer_config=writer_config or LogWriterConfig(),
    )


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


__all__ = ["AsyncLog", "delete_log", "list_log_names", "open_log"]

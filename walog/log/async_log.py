"""A log as coroutines: segments, the writer takeover, readers, truncation, retention.

``walog.aio.AsyncClient.open_log`` returns an :class:`AsyncLog`; ``walog.Log`` is its sync
facade (walog.log.sync).
"""

from __future__ import annotations

import contextlib

from walog.errors import NoSuchLedgerError, WalogError
from walog.log import truncation
from walog.log.ledgers import LedgerClientLike, delete_ledger_if_exists
from walog.log.log_metadata import (
    LogMetadata,
    commit_cursor,
    create_log,
    delete_log_record,
    list_logs,
    mark_archived,
    read_log,
    validate_log_name,
)
from walog.log.position import Position, Segment
from walog.log.reader import AsyncLogReader, StartAt, open_log_reader
from walog.log.registration import WriterInfo, forget_writers, live_writer
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.log.sink import collect_sink_orphans
from walog.log.subscriptions import SubscriptionInfo, subscriptions_of
from walog.log.writer import AsyncLogWriter, LedgerOptions, LogWriterConfig, open_log_writer


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
        return writer

    async def open_reader(
        self, start: StartAt = "earliest", *, subscription: str | None = None
    ) -> AsyncLogReader:
        """A tailing reader from ``"earliest"``, ``"latest"`` or a position; never fences.

        With ``subscription``, the reader resumes after what that subscription committed
        (``start`` applies only to a subscription that never committed), and its
        ``commit()`` records its progress.
        """
        return await open_log_reader(
            self._client,
            self.name,
            start,
            password=self.ledger_options.password,
            subscription=subscription,
        )

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

    async def writer(self) -> WriterInfo | None:
        """The log's live writer (host, pid, epoch, start time), None when none writes."""
        store = self._client.ctx.store
        return await live_writer(store, self.name, await self.metadata())

    async def truncate(self, before: Position) -> int:
        """Delete the ledgers whose every record is before ``before``; return how many.

        Never deletes the ledger being written.
        """
        if not isinstance(before, Position):
            raise TypeError(f"truncate() takes a walog.Position, got {type(before).__name__}")
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

    async def commit_cursor(self, consumer: str, position: Position | None) -> None:
        """Record that ``consumer`` has consumed every record before ``position`` (None
        removes the cursor). Retention keeps every ledger a cursor has not passed."""
        await commit_cursor(self._client.ctx.store, self.name, consumer, position)

    async def mark_archived(self, position: Position) -> None:
        """Record that every record before ``position`` is archived (only moves forward)."""
        await mark_archived(self._client.ctx.store, self.name, position)


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
    await forget_writers(client.ctx.store, name)


__all__ = ["AsyncLog", "delete_log", "list_log_names", "open_log"]

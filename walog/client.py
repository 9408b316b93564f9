"""The sync walog API: ``walog.connect(...)`` returns a :class:`Client`.

Every object here wraps its ``walog.aio`` counterpart and runs it on the process-wide event
loop thread (:class:`walog._loop_thread.LoopThread`). Appends do not hop threads one by one:
:meth:`LedgerWriter.append_async` puts the entry on a queue that the loop drains in batches
(one wake-up per batch), and completions are handed back in batches too.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from walog import aio
from walog._loop_thread import Handoff, LoopThread, SyncContext
from walog.config import ClientConfig
from walog.ledger.entry import Entry
from walog.ledger.placement import PlacementPolicy
from walog.ledger.reader import AsyncLedgerReader
from walog.ledger.writer import AsyncLedgerWriter, as_payload
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.log.sync import Log
from walog.log.writer import LogWriterConfig
from walog.metadata.layout import LedgerMetadata
from walog.transport.credentials import TlsConfig
from walog.wire.durability import Durability

if TYPE_CHECKING:
    # prometheus_client is imported only by a client that counts metrics.
    from walog.metrics.client import ClientMetrics

T = TypeVar("T")


class LedgerWriter(SyncContext):
    """Appends to a ledger this client created (a context manager: ``close()`` on exit).

    Attributes:
        async_writer: the underlying :class:`walog.aio.AsyncLedgerWriter`.
    """

    def __init__(self, writer: AsyncLedgerWriter, loop: LoopThread, max_entry_bytes: int) -> None:
        self.async_writer = writer
        self._loop = loop
        self._max_entry_bytes = max_entry_bytes
        # The async writer resolves each future itself when its entry completes: no asyncio
        # future, callback or thread hop per entry.
        self._handoff: Handoff[int] = Handoff(loop, writer.append_into)

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self.async_writer.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id confirmed (-1 before the first ack)."""
        return self.async_writer.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger's metadata as the writer last knew it."""
        return self.async_writer.metadata

    def append_async(self, data: bytes | bytearray | memoryview) -> concurrent.futures.Future[int]:
        """Queue an append; the future resolves with the entry id once it is confirmed.

        Raises:
            TypeError: ``data`` is a ``str`` or not bytes-like.
            ValueError: the entry exceeds the configured maximum (no id is taken).
        """
        payload = as_payload(data, self._max_entry_bytes)
        return self._handoff.put(payload)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append one entry; return its id once it and every lower entry are confirmed."""
        return self.append_async(data).result()

    def append_many_async(
        self, entries: Iterable[bytes | bytearray | memoryview]
    ) -> concurrent.futures.Future[list[int]]:
        """Queue appends of ``entries``, in order, with one future for all of them: it
        resolves with their entry ids once every one is confirmed, or fails with the first
        failure (entries before the failed one may be confirmed, as with
        :meth:`append_async`). One hand-over to the event loop for the whole batch.

        Raises:
            TypeError: an entry is a ``str`` or not bytes-like (nothing is appended).
            ValueError: an entry exceeds the configured maximum (nothing is appended).
        """
        limit = self._max_entry_bytes
        return self._handoff.put_many([as_payload(data, limit) for data in entries])

    def append_many(self, entries: Iterable[bytes | bytearray | memoryview]) -> list[int]:
        """Append ``entries`` in order; return their ids once every one is confirmed."""
        return self.append_many_async(entries).result()

    def force(self) -> int:
        """Make every entry appended so far durable; return the last synced entry id."""
        return self._loop.run(self._after_drain(self.async_writer.force))

    def close(self) -> None:
        """Wait for outstanding appends, then close the ledger (CAS to CLOSED)."""
        self._loop.run(self._after_drain(self.async_writer.close))

    async def _after_drain(self, step: Callable[[], Awaitable[T]]) -> T:
        self._handoff.drain()  # appends queued before this call go first
        return await step()


class LedgerReader(SyncContext):
    """Reads a ledger (a context manager: ``close()`` on exit).

    Attributes:
        async_reader: the underlying :class:`walog.aio.AsyncLedgerReader`.
    """

    def __init__(self, reader: AsyncLedgerReader, loop: LoopThread) -> None:
        self.async_reader = reader
        self._loop = loop

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self.async_reader.ledger_id

    @property
    def is_closed(self) -> bool:
        """True when the ledger is known to be CLOSED."""
        return self.async_reader.is_closed

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry known confirmed (for a closed ledger: its last entry)."""
        return self.async_reader.last_add_confirmed

    def read(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last``; NoSuchEntryError past the last add confirmed."""
        return self._loop.run(self.async_reader.read(first, last))

    def read_unconfirmed(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last``, possibly past the last add confirmed."""
        return self._loop.run(self.async_reader.read_unconfirmed(first, last))

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the last add confirmed."""
        return self._loop.run(self.async_reader.read_last_add_confirmed())

    def wait_last_add_confirmed(self, after: int, timeout: float) -> int:
        """Wait until the LAC exceeds ``after`` or ``timeout`` seconds pass; return the LAC."""
        return self._loop.run(self.async_reader.wait_last_add_confirmed(after, timeout))

    def close(self) -> None:
        """Release the reader."""
        self._loop.run(self.async_reader.close())


def connect(
    metadata_uri: str,
    *,
    timeout: float = 10.0,
    tls: TlsConfig | None = None,
    auth_token: str | None = None,
    config: ClientConfig | None = None,
    metrics: ClientMetrics | None = None,
    placement: str | PlacementPolicy | None = None,
) -> Client:
    """Connect to a walog cluster through its metadata store (see :func:`walog.aio.connect`).

    Returns a :class:`Client` (a context manager).
    """
    loop = LoopThread.instance()
    client = loop.run(
        aio.connect(
            metadata_uri,
            timeout=timeout,
            tls=tls,
            auth_token=auth_token,
            config=config,
            metrics=metrics,
            placement=placement,
        )
    )
    return Client(client, loop)


class Client(SyncContext):
    """A connection to a walog cluster (a context manager: ``close()`` on exit).

    Attributes:
        async_client: the underlying :class:`walog.aio.AsyncClient`.
        loop_thread: the event loop thread the async client runs on.
    """

    def __init__(self, client: aio.AsyncClient, loop: LoopThread) -> None:
        self.async_client = client
        self.loop_thread = loop

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        durability: Durability = Durability.PERSISTENT,
        password: bytes = b"",
        custom_metadata: Mapping[str, str] | None = None,
    ) -> LedgerWriter:
        """Create a ledger and return its writer (see ``AsyncClient.create_ledger``)."""
        writer = self.loop_thread.run(
            self.async_client.create_ledger(
                ensemble_size,
                write_quorum,
                ack_quorum,
                durability=durability,
                password=password,
                custom_metadata=custom_metadata,
            )
        )
        return LedgerWriter(writer, self.loop_thread, self.async_client.ctx.config.max_entry_bytes)

    def open_ledger(
        self, ledger_id: int, *, recovery: bool = True, password: bytes = b""
    ) -> LedgerReader:
        """Open a ledger for reading (see ``AsyncClient.open_ledger``)."""
        reader = self.loop_thread.run(
            self.async_client.open_ledger(ledger_id, recovery=recovery, password=password)
        )
        return LedgerReader(reader, self.loop_thread)

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """The ledger's metadata; NoSuchLedgerError when it does not exist."""
        return self.loop_thread.run(self.async_client.ledger_metadata(ledger_id))

    def delete_ledger(self, ledger_id: int) -> None:
        """Delete a ledger; NoSuchLedgerError when it does not exist."""
        self.loop_thread.run(self.async_client.delete_ledger(ledger_id))

    def list_ledgers(self) -> list[int]:
        """Ids of every ledger, ascending."""
        return self.loop_thread.run(self.async_client.list_ledgers())

    def bookies(self) -> list[str]:
        """Ids of the bookies currently available, sorted."""
        return self.loop_thread.run(self.async_client.bookies())

    def bookie_racks(self) -> dict[str, str]:
        """The rack of each available bookie, by bookie id."""
        return self.loop_thread.run(self.async_client.bookie_racks())

    def read_only_bookies(self) -> list[str]:
        """Ids of the bookies currently read-only (they serve reads but take no new
        ledgers: full disks or a failed journal), sorted."""
        return self.loop_thread.run(self.async_client.read_only_bookies())

    # -- logs (walog.log) -------------------------------------------------------------

    def open_log(
        self,
        name: str,
        *,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        durability: Durability = Durability.PERSISTENT,
        password: bytes = b"",
        roll_policy: RollPolicy | None = None,
        retention: RetentionPolicy | None = None,
        writer_config: LogWriterConfig | None = None,
    ) -> Log:
        """Open log ``name``, creating it if it does not exist (see ``AsyncClient.open_log``)."""
        log = self.loop_thread.run(
            self.async_client.open_log(
                name,
                ensemble_size=ensemble_size,
                write_quorum=write_quorum,
                ack_quorum=ack_quorum,
                durability=durability,
                password=password,
                roll_policy=roll_policy,
                retention=retention,
                writer_config=writer_config,
            )
        )
        return Log(log, self.loop_thread)

    def list_logs(self) -> list[str]:
        """Names of every log, sorted."""
        return self.loop_thread.run(self.async_client.list_logs())

    def delete_log(self, name: str, *, password: bytes = b"") -> None:
        """Delete a log and its ledgers; NoSuchLogError when it does not exist."""
        self.loop_thread.run(self.async_client.delete_log(name, password=password))

    def close(self) -> None:
        """Close the bookie connections and the metadata session."""
        self.loop_thread.run(self.async_client.close())


__all__ = ["Client", "LedgerReader", "LedgerWriter", "connect"]

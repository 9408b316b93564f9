"""The sync walog API: ``walog.connect(...)`` returns a :class:`Client`.

:class:`Client` wraps :class:`walog.aio.AsyncClient` and runs it on the process-wide event
loop thread (:class:`walog._loop_thread.LoopThread`). Every sync handle follows the same
pattern and sits beside the coroutines it wraps, in its package's ``sync`` module: the
ledger writer and reader in :mod:`walog.ledger.sync`, the log and its writer and reader in
:mod:`walog.log.sync`, the state machine in :mod:`walog.recipes.sync`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from walog import aio
from walog._loop_thread import LoopThread, SyncContext
from walog.config import ClientConfig
from walog.ledger.placement import PlacementPolicy
from walog.ledger.sync import LedgerReader, LedgerWriter
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.log.sync import Log
from walog.log.writer import LogWriterConfig
from walog.metadata.layout import LedgerMetadata
from walog.transport.credentials import TlsConfig
from walog.wire.durability import Durability

if TYPE_CHECKING:
    # prometheus_client is imported only by a client that counts metrics.
    from walog.metrics.client import ClientMetrics


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


__all__ = ["Client", "connect"]

"""The walog client API as coroutines (``walog.connect`` is the sync facade over this).

::

    import walog.aio

    async with await walog.aio.connect("sqlite:///tmp/walog.db") as client:
        writer = await client.create_ledger(3, 3, 2)
        entry_id = await writer.append(b"hello")
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id)
        entries = await reader.read(0, entry_id)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from walog.config import ClientConfig
from walog.errors import NoSuchLedgerError
from walog.ledger.context import LedgerContext
from walog.ledger.create import create_ledger, verify_password
from walog.ledger.ensemble import available_bookies, available_racks, read_only_bookies
from walog.ledger.placement import PlacementPolicy, placement_policy
from walog.ledger.reader import AsyncLedgerReader
from walog.ledger.recovery import recover
from walog.ledger.writer import AsyncLedgerWriter
from walog.log.async_log import AsyncLog, delete_log, list_log_names, open_log
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.log.writer import LedgerOptions, LogWriterConfig
from walog.memory import keep_freed_memory
from walog.metadata import open_store
from walog.metadata.layout import LEDGERS, LedgerMetadata, ledger_path
from walog.metadata.store import NodeNotFoundError
from walog.transport.credentials import TlsConfig
from walog.transport.network import NetworkBookiePool
from walog.wire.durability import Durability

if TYPE_CHECKING:
    # prometheus_client is imported only by a client that counts metrics.
    from walog.metrics.client import ClientMetrics


async def connect(
    metadata_uri: str,
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - also the metadata store's per-call limit
    tls: TlsConfig | None = None,
    auth_token: str | None = None,
    config: ClientConfig | None = None,
    metrics: ClientMetrics | None = None,
    placement: str | PlacementPolicy | None = None,
) -> AsyncClient:
    """Connect to a walog cluster through its metadata store.

    Args:
        metadata_uri: ``zk://HOST:PORT[,HOST:PORT...]/CHROOT`` or ``sqlite:///ABS/PATH.db``.
        timeout: seconds to wait for the metadata store.
        tls: TLS settings for bookie connections (None: plaintext).
        auth_token: bearer token for bookies started with ``--auth-token-file``.
        config: client settings (timeouts, entry and frame limits).
        metrics: where the client counts its Prometheus metrics (:func:`walog.metrics.register`);
            None counts nothing.
        placement: how ensembles and replacements are chosen: ``"rack-aware"`` (the
            default: each write quorum on as many racks as possible), ``"random"``, or a
            :class:`walog.PlacementPolicy`.

    Raises:
        ValueError: the URI or a setting is malformed, or the placement policy unknown.
        walog.errors.MetadataError: the metadata store cannot be reached.
    """
    config = config or ClientConfig()
    policy = placement_policy(placement)
    if config.keep_freed_memory:
        keep_freed_memory()
    pool = NetworkBookiePool(config, tls=tls, auth_token=auth_token)
    store = await open_store(metadata_uri, timeout=timeout)
    return AsyncClient(LedgerContext(store, pool, config, metrics), placement=policy)


class AsyncClient:
    """A connection to a walog cluster: ledgers (and logs) by coroutine.

    An async context manager; :meth:`close` releases the metadata session and the bookie
    connections. Writers and readers opened through it must not be used after that.
    """

    def __init__(self, ctx: LedgerContext, *, placement: PlacementPolicy | None = None) -> None:
        self.ctx = ctx
        self._placement = placement_policy(placement)
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- ledgers ----------------------------------------------------------------------

    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        durability: Durability = Durability.PERSISTENT,
        password: bytes = b"",
        custom_metadata: Mapping[str, str] | None = None,
    ) -> AsyncLedgerWriter:
        """Create a ledger and return its writer.

        Raises:
            ValueError: unless ``ensemble_size >= write_quorum >= ack_quorum >= 1``, or a
                VOLATILE ledger with ``ensemble_size != write_quorum``.
            NotEnoughBookiesError: fewer than ``ensemble_size`` bookies are available.
        """
        return await create_ledger(
            self.ctx,
            ensemble_size,
            write_quorum,
            ack_quorum,
            durability=durability,
            password=password,
            custom_metadata=custom_metadata,
            placement=self._placement,
        )

    async def open_ledger(
        self, ledger_id: int, *, recovery: bool = True, password: bytes = b""
    ) -> AsyncLedgerReader:
        """Open a ledger for reading.

        With ``recovery=True`` an OPEN ledger is fenced and recovered (its writer can add
        nothing more) and is CLOSED afterwards; ``recovery=False`` never fences and reads
        are bounded by the last add confirmed.

        Raises:
            NoSuchLedgerError: the ledger does not exist.
            UnauthorizedError: ``password`` is not the ledger's password.
        """
        metadata, version = await self.ctx.read_metadata(ledger_id)
        key = verify_password(metadata, password)
        if recovery and not metadata.is_closed:
            metadata, version = await recover(self.ctx, ledger_id, key)
        return AsyncLedgerReader(self.ctx, metadata, version, key)

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """The ledger's metadata; NoSuchLedgerError when it does not exist."""
        metadata, _ = await self.ctx.read_metadata(ledger_id)
        return metadata

    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete a ledger's metadata; bookies reclaim its entries in the background.

        Raises:
            NoSuchLedgerError: the ledger does not exist.
        """
        try:
            await self.ctx.store.delete(ledger_path(ledger_id))
        except NodeNotFoundError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from exc

    async def list_ledgers(self) -> list[int]:
        """Ids of every ledger, ascending."""
        names = await self.ctx.store.children(LEDGERS)
        return sorted(int(name) for name in names if name.isdigit())

    async def bookies(self) -> list[str]:
        """Ids of the bookies currently available, sorted."""
        return await available_bookies(self.ctx.store)

    async def bookie_racks(self) -> dict[str, str]:
        """The rack of each available bookie, by bookie id (``"default"`` for a bookie
        started without ``--rack``)."""
        return await available_racks(self.ctx.store)

    async def read_only_bookies(self) -> list[str]:
        """Ids of the bookies currently read-only (they serve reads but take no new
        ledgers: full disks or a failed journal), sorted."""
        return await read_only_bookies(self.ctx.store)

    # -- logs (walog.log) -------------------------------------------------------------

    async def open_log(
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
    ) -> AsyncLog:
        """Open log ``name`` (created empty if it does not exist).

        The quorum settings, durability and password apply to the ledgers its writers
        create; ``roll_policy`` and ``retention`` default to never rolling, keeping all.

        Raises:
            ValueError: a bad log name (empty, over 200 characters, ``/``, ``..``, control
                characters) or quorum settings.
        """
        return await open_log(
            self,
            name,
            ledger_options=LedgerOptions(
                ensemble_size, write_quorum, ack_quorum, durability, password
            ),
            roll_policy=roll_policy,
            retention=retention,
            writer_config=writer_config,
        )

    async def list_logs(self) -> list[str]:
        """Names of every log, sorted."""
        return await list_log_names(self)

    async def delete_log(self, name: str, *, password: bytes = b"") -> None:
        """Delete a log and its ledgers (a writer still appending is fenced first).

        Raises:
            NoSuchLogError: the log does not exist.
        """
        await delete_log(self, name, password=password)

    # -- lifecycle --------------------------------------------------------------------

    async def close(self) -> None:
        """Close the bookie connections and the metadata session (idempotent)."""
        if self._closed:
            return
        self._closed = True
        results = await asyncio.gather(
            self.ctx.pool.close(), self.ctx.store.close(), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result


__all__ = [
    "AsyncClient",
    "AsyncLedgerReader",
    "AsyncLedgerWriter",
    "ClientConfig",
    "TlsConfig",
    "connect",
]

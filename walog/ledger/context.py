"""What every ledger operation needs: the metadata store, bookie connections, settings.

Also the two metadata steps every protocol piece shares: read a ledger's metadata with its
version, and compare-and-swap it; and the retry policy of metadata steps.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from walog.config import ClientConfig
from walog.errors import NoSuchLedgerError, is_retriable
from walog.metadata.layout import LedgerMetadata, ledger_path
from walog.metadata.store import MetadataStore, NodeNotFoundError
from walog.transport.base import BookiePool

if TYPE_CHECKING:
    # prometheus_client is imported only by a client that counts metrics.
    from walog.metrics.client import ClientMetrics

METADATA_ATTEMPTS = 10


def metadata_retrying() -> AsyncRetrying:
    """Retry policy for metadata steps: retriable errors only, exponential back-off on the
    event loop's clock (``asyncio.sleep``), a bounded number of attempts."""
    return AsyncRetrying(
        retry=retry_if_exception(is_retriable),
        wait=wait_exponential(multiplier=0.01, max=1.0),
        stop=stop_after_attempt(METADATA_ATTEMPTS),
        reraise=True,
    )


@dataclasses.dataclass
class LedgerContext:
    """The metadata store, the bookie pool and the settings, passed to protocol code."""

    store: MetadataStore
    pool: BookiePool
    config: ClientConfig = dataclasses.field(default_factory=ClientConfig)
    metrics: ClientMetrics | None = None
    """Where protocol code counts client metrics; None (the default) counts nothing."""

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """The ledger's metadata and its version; NoSuchLedgerError when absent."""
        try:
            raw, version = await self.store.get(ledger_path(ledger_id))
        except NodeNotFoundError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from exc
        return LedgerMetadata.from_json(raw), version

    async def write_metadata(self, metadata: LedgerMetadata, version: int) -> int:
        """CAS the ledger's metadata; MetadataConflictError when ``version`` is stale."""
        try:
            return await self.store.set(
                ledger_path(metadata.ledger_id), metadata.to_json(), version
            )
        except NodeNotFoundError as exc:
            raise NoSuchLedgerError(f"ledger {metadata.ledger_id} was deleted") from exc


__all__ = ["METADATA_ATTEMPTS", "LedgerContext", "metadata_retrying"]

"""What the log layer needs from the ledger layer, as structural types.

The log layer only uses these members of ``walog.aio.AsyncClient`` and its ledger handles;
naming them here keeps the dependency small and visible, and lets the type checker verify
that the ledger layer provides them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from walog.config import ClientConfig
from walog.errors import NoSuchLedgerError, WalogError
from walog.ledger.entry import Entry
from walog.ledger.options import LedgerOptions
from walog.ledger.tail import StoredTail
from walog.metadata.layout import LedgerMetadata
from walog.metadata.store import MetadataStore

LOG_TAG = "walog.log"
"""Custom metadata key naming the log a ledger was created for."""


class LedgerWriterLike(Protocol):
    """An open ledger this process writes (``walog.aio.AsyncLedgerWriter``)."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def last_add_confirmed(self) -> int: ...

    @property
    def last_add_pushed(self) -> int: ...

    def append_nowait(self, data: bytes) -> asyncio.Future[int]: ...

    def abort(self, error: WalogError) -> None: ...

    async def force(self) -> int: ...

    async def close(self) -> Any: ...


class LedgerReaderLike(Protocol):
    """A ledger opened for reading (``walog.aio.AsyncLedgerReader``)."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def is_closed(self) -> bool: ...

    @property
    def last_add_confirmed(self) -> int: ...

    async def read(self, first: int, last: int) -> Sequence[Entry]: ...

    async def read_last_add_confirmed(self) -> int: ...

    async def read_stored_tail(self) -> StoredTail: ...

    async def wait_last_add_confirmed(self, after: int, timeout: float) -> int: ...  # noqa: ASYNC109

    async def close(self) -> None: ...


class LedgerContextLike(Protocol):
    """The client's shared context: the log layer needs the metadata store and the client's
    settings."""

    @property
    def store(self) -> MetadataStore: ...

    @property
    def config(self) -> ClientConfig: ...


class LedgerClientLike(Protocol):
    """The async client (``walog.aio.AsyncClient``)."""

    @property
    def ctx(self) -> LedgerContextLike: ...

    async def create_ledger_with(
        self, options: LedgerOptions, *, custom_metadata: Mapping[str, str] | None = ...
    ) -> LedgerWriterLike: ...

    async def open_ledger(
        self, ledger_id: int, *, recovery: bool = ..., password: bytes = ...
    ) -> LedgerReaderLike: ...

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata: ...

    async def delete_ledger(self, ledger_id: int) -> None: ...

    async def list_ledgers(self) -> list[int]: ...


async def delete_ledger_if_exists(client: LedgerClientLike, ledger_id: int) -> None:
    """Delete a ledger; one that is already gone is fine (deletion is idempotent)."""
    with contextlib.suppress(NoSuchLedgerError):
        await client.delete_ledger(ledger_id)


__all__ = [
    "LOG_TAG",
    "LedgerClientLike",
    "LedgerContextLike",
    "LedgerReaderLike",
    "LedgerWriterLike",
    "delete_ledger_if_exists",
]

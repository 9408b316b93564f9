"""A live log writer registers itself: who writes the log, from where, since when.

Each writer that took a log over as epoch ``E`` holds a liveness-bound record at
``/logwriters/<name>/<E>`` (an ephemeral node in ZooKeeper, a lease row renewed by the
store's heartbeat in SQLite: walog.metadata.store ``register``) with its host, pid, epoch and
start time. The record goes when the writer closes, fails, or its process dies (its session
ends). A writer fenced by a newer takeover may keep its record while its process lives, so
the log's writer is the record of the log's current epoch, and only while the log's last
ledger is OPEN: :func:`live_writer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import time
from typing import Any

from walog._loggers import get_logger
from walog.errors import NewerFormatError, WalogError
from walog.format_versions import check_version
from walog.log.log_metadata import LogMetadata
from walog.metadata.layout import log_writer_path, log_writers_path
from walog.metadata.store import MetadataStore, NodeExistsError, NodeNotFoundError

log = get_logger(__name__)

WRITER_RECORD_FORMAT = 1
"""The format version of writer registrations (``"format"``; a record without it is version
1) this walog writes, and the newest it reads."""


@dataclasses.dataclass(frozen=True)
class WriterInfo:
    """A log writer's registration.

    Attributes:
        host: the host name of the writer's machine.
        pid: the writer's process id there.
        epoch: the log's epoch its takeover made (``LogMetadata.epoch``).
        started_at: when it took the log over (seconds since the epoch).
    """

    host: str
    pid: int
    epoch: int
    started_at: float

    def to_json(self) -> bytes:
        """The record's bytes."""
        doc = {"format": WRITER_RECORD_FORMAT, **dataclasses.asdict(self)}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> WriterInfo:
        """Parse :meth:`to_json`'s bytes.

        Raises:
            NewerFormatError: its format is newer than :data:`WRITER_RECORD_FORMAT` (the
                message names both versions).
            ValueError: not a writer registration.
        """
        try:
            doc: dict[str, Any] = json.loads(raw)
            what = f"the registration of log writer epoch {doc.get('epoch', '?')}"
            found = doc.get("format", 1)
            check_version(what, found, WRITER_RECORD_FORMAT, ValueError, newer=NewerFormatError)
            return cls(
                host=str(doc["host"]),
                pid=int(doc["pid"]),
                epoch=int(doc["epoch"]),
                started_at=float(doc["started_at"]),
            )
        except (TypeError, KeyError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed writer registration: {exc}") from exc

    def describe(self) -> str:
        """``pid 4242 on host-a, epoch 3, since 2026-01-02 03:04:05 UTC`` (for people)."""
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))
        return f"pid {self.pid} on {self.host}, epoch {self.epoch}, since {since}"


class WriterRegistration:
    """The registration of one writer; :meth:`end` removes it (once)."""

    def __init__(self, store: MetadataStore, name: str, info: WriterInfo) -> None:
        self.info = info
        self._store = store
        self._path = log_writer_path(name, info.epoch)
        self._name = name
        self._ended: asyncio.Task[None] | None = None

    async def register(self) -> None:
        """Create the record. One left at this epoch by a writer of an earlier log of the
        same name (deleted, then created again) is replaced."""
        data = self.info.to_json()
        try:
            await self._store.register(self._path, data)
        except NodeExistsError:
            with contextlib.suppress(NodeNotFoundError):
                await self._store.delete(self._path)
            await self._store.register(self._path, data)

    def end(self) -> asyncio.Task[None]:
        """Remove the record (in the background; idempotent): the writer closed or failed."""
        if self._ended is None:
            self._ended = asyncio.ensure_future(self._unregister())
        return self._ended

    async def _unregister(self) -> None:
        try:
            await self._store.unregister(self._path)
        except WalogError as exc:  # the record still goes with the session
            log.warning("could not remove writer registration", log=self._name, error=str(exc))


async def register_writer(store: MetadataStore, name: str, epoch: int) -> WriterRegistration:
    """Register this process as log ``name``'s writer of ``epoch``."""
    info = WriterInfo(socket.gethostname(), os.getpid(), epoch, time.time())
    registration = WriterRegistration(store, name, info)
    await registration.register()
    return registration


async def live_writer(store: MetadataStore, name: str, meta: LogMetadata) -> WriterInfo | None:
    """The writer of log ``name`` (whose record is ``meta``) if one is alive, else None.

    Alive: registered at the log's current epoch, with the log's last ledger OPEN (a writer
    closing it, or ``walog recover``, marks it CLOSED).
    """
    last = meta.ledgers[-1] if meta.ledgers else None
    if last is None or last.is_closed:
        return None
    try:
        raw, _ = await store.get(log_writer_path(name, meta.epoch))
    except NodeNotFoundError:
        return None
    try:
        return WriterInfo.from_json(raw)
    except NewerFormatError:
        raise
    except ValueError:
        return None


async def forget_writers(store: MetadataStore, name: str) -> None:
    """Remove every writer registration of log ``name`` (the log is being deleted)."""
    with contextlib.suppress(NodeNotFoundError):
        await store.delete(log_writers_path(name))


__all__ = [
    "WRITER_RECORD_FORMAT",
    "WriterInfo",
    "WriterRegistration",
    "forget_writers",
    "live_writer",
    "register_writer",
]

"""Where snapshots live: in bookie ledgers of their own, or in files of a directory.

A snapshot is written whole (chunks of at most :data:`CHUNK_BYTES`), measured and
checksummed (SHA-256) while written, made durable (the ledger closed, or the file fsynced
and renamed into place), and only then listed in the log's metadata by
:func:`publish_snapshot`. Loading checks the checksum before anything reaches the service:
a snapshot that does not match raises :class:`CorruptSnapshotError`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import os
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Protocol

from walog.errors import NoSuchLedgerError, WalogError
from walog.ledger.options import LedgerOptions
from walog.log.ledgers import LedgerClientLike, delete_ledger_if_exists
from walog.log.log_metadata import LogMetadata, SnapshotInfo, read_log, update_log
from walog.log.position import Position
from walog.recipes.policy import with_snapshot
from walog.wire.durability import Durability

CHUNK_BYTES = 512 * 1024
"""Bytes per ledger entry of a snapshot."""
SPOOL_BYTES = 8 * 1024 * 1024
"""A snapshot larger than this is spooled to a temporary file instead of memory."""
SNAPSHOT_TAG = "walog.snapshot-of"
"""Custom metadata key naming the log a snapshot ledger belongs to."""
POSITION_TAG = "walog.snapshot-position"
"""Custom metadata key holding the position a snapshot ledger covers."""
READ_BATCH_ENTRIES = 16
INFLIGHT_CHUNKS = 8
"""Snapshot chunks appended but not yet acknowledged, at most."""


class CorruptSnapshotError(WalogError):
    """A snapshot's bytes do not match its listed size or checksum, or are gone."""


class SnapshotStore(Protocol):
    """Keeps snapshot bytes durably (a ledger store or a directory store)."""

    async def save(self, data: IO[bytes], position: Position, node: str) -> SnapshotInfo:
        """Store ``data`` (read from its start) durably; return its description."""

    async def load(self, info: SnapshotInfo) -> IO[bytes]:
        """The snapshot's bytes, checked against ``info``, positioned at the start.

        Raises:
            CorruptSnapshotError: missing, wrong size or wrong checksum.
        """

    async def delete(self, info: SnapshotInfo) -> None:
        """Delete the snapshot's bytes (nothing when already gone)."""


def spool(chunks: bytes | Iterable[bytes]) -> IO[bytes]:
    """Copy a service's snapshot (bytes or an iterable of bytes) into a rewound spooled
    file, so it is a fixed view whatever the service does next.

    Raises:
        TypeError: the snapshot is neither bytes nor an iterable of bytes.
    """
    out: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
    try:
        if isinstance(chunks, bytes | bytearray | memoryview):
            out.write(chunks)
        elif isinstance(chunks, str) or not isinstance(chunks, Iterable):
            raise TypeError(
                f"snapshot() must return bytes or an iterable of bytes, got {type(chunks).__name__}"
            )
        else:
            for chunk in chunks:
                if not isinstance(chunk, bytes | bytearray | memoryview):
                    raise TypeError(
                        f"snapshot() yielded {type(chunk).__name__}; chunks must be bytes"
                    )
                out.write(chunk)
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def _chunks(data: IO[bytes]) -> Iterable[bytes]:
    while chunk := data.read(CHUNK_BYTES):
        yield chunk


def _digest_text(digest: hashlib._Hash) -> str:
    return f"sha256:{digest.hexdigest()}"


def _check(info: SnapshotInfo, size: int, checksum: str) -> None:
    if size != info.size_bytes or checksum != info.checksum:
        raise CorruptSnapshotError(
            f"snapshot at {info.position} ({info.location}) is corrupt: {size} bytes with "
            f"{checksum}, listed as {info.size_bytes} bytes with {info.checksum}"
        )


class LedgerSnapshotStore:
    """Snapshots in ledgers of their own, replicated like the log's ledgers.

    Args:
        client: the async client (``walog.aio``).
        log_name: the log the snapshots belong to (tagged in the ledgers' metadata).
        options: ensemble, quorums and password of the snapshot ledgers.
    """

    def __init__(self, client: LedgerClientLike, log_name: str, options: LedgerOptions) -> None:
        self._client = client
        self._log_name = log_name
        self._options = options

    async def save(self, data: IO[bytes], position: Position, node: str) -> SnapshotInfo:
        """Write ``data`` into a new ledger, close it, and describe it."""
        # Always PERSISTENT, whatever the log's ledgers are: the log is truncated up to a
        # snapshot, so a snapshot lost with a bookie's unsynced writes could not be rebuilt.
        opts = dataclasses.replace(self._options, durability=Durability.PERSISTENT)
        writer = await self._client.create_ledger_with(
            opts,
            custom_metadata={
                SNAPSHOT_TAG: self._log_name,
                "walog.snapshot-position": str(position),
            },
        )
        digest, size = hashlib.sha256(), 0
        inflight: collections.deque[asyncio.Future[int]] = collections.deque()
        try:
            for chunk in _chunks(data):
                digest.update(chunk)
                size += len(chunk)
                inflight.append(writer.append_nowait(chunk))
                if len(inflight) > INFLIGHT_CHUNKS:
                    await inflight.popleft()
            for ack in inflight:
                await ack
            await writer.close()
        except BaseException:
            await delete_ledger_if_exists(self._client, writer.ledger_id)
            raise
        return SnapshotInfo(
            position=position,
            ledger_id=writer.ledger_id,
            path=None,
            size_bytes=size,
            checksum=_digest_text(digest),
            created_at=time.time(),
            node=node,
        )

    async def load(self, info: SnapshotInfo) -> IO[bytes]:
        """Read the ledger back and check it."""
        if info.ledger_id is None:
            raise CorruptSnapshotError(f"snapshot at {info.position} names no ledger")
        try:
            reader = await self._client.open_ledger(
                info.ledger_id, recovery=False, password=self._options.password
            )
        except NoSuchLedgerError as exc:
            raise CorruptSnapshotError(
                f"snapshot at {info.position}: ledger {info.ledger_id} is gone"
            ) from exc
        out: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
        digest, size = hashlib.sha256(), 0
        try:
            last = reader.last_add_confirmed
            for first in range(0, last + 1, READ_BATCH_ENTRIES):
                for entry in await reader.read(first, min(last, first + READ_BATCH_ENTRIES - 1)):
                    digest.update(entry.data)
                    size += len(entry.data)
                    out.write(entry.data)
            _check(info, size, _digest_text(digest))
        except BaseException:
            out.close()
            raise
        finally:
            await reader.close()
        out.seek(0)
        return out

    async def delete(self, info: SnapshotInfo) -> None:
        """Delete the snapshot's ledger."""
        if info.ledger_id is not None:
            await delete_ledger_if_exists(self._client, info.ledger_id)


class DirectorySnapshotStore:
    """Snapshots as files of a directory every node can reach (a local disk for nodes on
    one host, or a shared filesystem). Files are fsynced, then renamed into place.

    Args:
        directory: where the files go (created if missing).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    async def save(self, data: IO[bytes], position: Position, node: str) -> SnapshotInfo:
        """Write ``data`` to a new file durably, and describe it."""
        return await asyncio.to_thread(self._save, data, position, node)

    def _save(self, data: IO[bytes], position: Position, node: str) -> SnapshotInfo:
        self.directory.mkdir(parents=True, exist_ok=True)
        where = f"{position.ledger_id}-{position.entry_id}-{position.slot}"
        name = f"snapshot-{where}-{uuid.uuid4().hex[:8]}"
        final = self.directory / name
        partial = self.directory / f".{name}.partial"
        digest, size = hashlib.sha256(), 0
        try:
            with partial.open("wb") as out:
                for chunk in _chunks(data):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            partial.rename(final)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the rename itself survives a crash
            finally:
                os.close(dir_fd)
        finally:
            partial.unlink(missing_ok=True)
        return SnapshotInfo(
            position=position,
            ledger_id=None,
            path=str(final),
            size_bytes=size,
            checksum=_digest_text(digest),
            created_at=time.time(),
            node=node,
        )

    async def load(self, info: SnapshotInfo) -> IO[bytes]:
        """Open the file and check it."""
        return await asyncio.to_thread(self._load, info)

    def _load(self, info: SnapshotInfo) -> IO[bytes]:
        if info.path is None:
            raise CorruptSnapshotError(f"snapshot at {info.position} names no file")
        try:
            handle = open(info.path, "rb")  # noqa: SIM115 - handed to the caller
        except OSError as exc:
            raise CorruptSnapshotError(
                f"snapshot at {info.position}: cannot open {info.path}: {exc}"
            ) from exc
        try:
            digest, size = hashlib.sha256(), 0
            for chunk in _chunks(handle):
                digest.update(chunk)
                size += len(chunk)
            _check(info, size, _digest_text(digest))
        except BaseException:
            handle.close()
            raise
        handle.seek(0)
        return handle

    async def delete(self, info: SnapshotInfo) -> None:
        """Delete the file."""
        if info.path is not None:
            await asyncio.to_thread(Path(info.path).unlink, missing_ok=True)


async def publish_snapshot(
    client: LedgerClientLike, log_name: str, info: SnapshotInfo, keep: int
) -> tuple[LogMetadata, bool, tuple[SnapshotInfo, ...]]:
    """List ``info`` in the log's metadata (CAS), dropping the oldest beyond ``keep``.

    Returns the stored metadata, whether ``info`` was listed (not when a snapshot at least
    as recent already was), and the snapshots dropped from the list (to delete).
    """
    # Over every attempt: one may have been applied with its answer lost, so a retry that
    # finds ``info`` already listed counts it as ours and keeps what that attempt dropped.
    dropped: tuple[SnapshotInfo, ...] = ()

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        nonlocal dropped
        if info in meta.snapshots:
            return None
        change = with_snapshot(meta.snapshots, info, keep)
        if change is None:
            return None
        dropped = change[1]
        return meta.replace(snapshots=change[0])

    meta, _ = await update_log(client.ctx.store, log_name, mutate)
    still = set(meta.snapshots)
    return meta, info in meta.snapshots, tuple(s for s in dropped if s not in still)


async def collect_unlisted_snapshots(client: LedgerClientLike, log_name: str) -> int:
    """Delete snapshot ledgers of ``log_name`` that were never listed and never can be
    (a node crashed between writing and listing them); return how many.

    A snapshot is listed only when it is newer than every listed one, so an unlisted
    snapshot ledger at or before the newest listed position is garbage, while a newer one
    may belong to a node about to list it and stays.
    """
    meta, _ = await read_log(client.ctx.store, log_name)
    if not meta.snapshots:
        return 0
    newest = meta.snapshots[-1].position
    known = {*meta.ledger_ids, *meta.pending_deletion}
    known |= {s.ledger_id for s in meta.snapshots if s.ledger_id is not None}
    deleted = 0
    for ledger_id in await client.list_ledgers():
        if ledger_id in known:
            continue
        try:
            tags = (await client.ledger_metadata(ledger_id)).custom_metadata or {}
        except NoSuchLedgerError:
            continue
        if tags.get(SNAPSHOT_TAG) != log_name:
            continue
        try:
            position = Position.parse(tags.get(POSITION_TAG, ""))
        except ValueError:
            continue
        if position <= newest:
            await delete_ledger_if_exists(client, ledger_id)
            deleted += 1
    return deleted


__all__ = [
    "CHUNK_BYTES",
    "SNAPSHOT_TAG",
    "CorruptSnapshotError",
    "DirectorySnapshotStore",
    "LedgerSnapshotStore",
    "SnapshotStore",
    "collect_unlisted_snapshots",
    "publish_snapshot",
    "spool",
]

"""A node's snapshots: when one is due, taking and listing it, deleting the ones dropped,
truncating the log behind the oldest kept, and restoring the newest valid one."""

from __future__ import annotations

import time
from pathlib import Path

from walog._loggers import get_logger
from walog.errors import WalogError
from walog.log.async_log import AsyncLog
from walog.log.log_metadata import SnapshotInfo
from walog.log.position import Position, ledger_start
from walog.recipes.policy import SnapshotPolicy, restore_order, truncation_point
from walog.recipes.service import Service
from walog.recipes.snapshots import (
    CorruptSnapshotError,
    DirectorySnapshotStore,
    LedgerSnapshotStore,
    SnapshotStore,
    collect_unlisted_snapshots,
    publish_snapshot,
    spool,
)

log = get_logger(__name__)

# Restores in a row that may find their snapshot dropped by a newer one (each retry reads
# a list that has moved on, so more than a few means snapshots are taken absurdly often).
RESTORE_ATTEMPTS = 8


class SnapshotChurnError(WalogError):
    """Every restore attempt found its snapshot deleted by a newer one meanwhile."""


class SnapshotKeeper:
    """Snapshots of one node's service on one log.

    Args:
        log: the log the snapshots cover.
        service: the state (its ``snapshot`` and ``restore``).
        node_id: recorded with each snapshot.
        policy: when one is due, how many are kept, whether the log is truncated.
        directory: keep new snapshots as files there instead of in ledgers of their own.
    """

    def __init__(
        self,
        log: AsyncLog,
        service: Service,
        node_id: str,
        policy: SnapshotPolicy,
        directory: str | Path | None,
    ) -> None:
        self._log = log
        self._service = service
        self._node_id = node_id
        self._policy = policy
        self._store: SnapshotStore = (
            DirectorySnapshotStore(directory)
            if directory is not None
            else LedgerSnapshotStore(log.client, log.name, log.ledger_options)
        )
        self._reset()

    def _reset(self) -> None:
        self._records = self._bytes = 0
        self._since = time.monotonic()

    def applied(self, size_bytes: int) -> None:
        """Count one record applied since the last snapshot."""
        self._records += 1
        self._bytes += size_bytes

    def due(self) -> bool:
        """True when the policy asks for a snapshot now."""
        age = time.monotonic() - self._since
        return self._policy.due(records=self._records, size_bytes=self._bytes, age=age)

    def _store_for(self, info: SnapshotInfo) -> SnapshotStore:
        """The store holding ``info`` (whichever this node writes to)."""
        if info.ledger_id is not None:
            return LedgerSnapshotStore(self._log.client, self._log.name, self._log.ledger_options)
        assert info.path is not None
        return DirectorySnapshotStore(Path(info.path).parent)

    async def take(self, position: Position) -> SnapshotInfo | None:
        """Snapshot the state, which holds every record before ``position``; store, list,
        drop the oldest, truncate. Returns the listed snapshot, or None when one at least
        as recent was already listed (ours is deleted then)."""
        data = spool(self._service.snapshot())  # consumed now: the state at ``position``
        self._reset()
        with data:
            info = await self._store.save(data, position, self._node_id)
        meta, listed, dropped = await publish_snapshot(
            self._log.client, self._log.name, info, self._policy.keep
        )
        if not listed:
            await self._store_for(info).delete(info)
        for old in dropped:
            await self._store_for(old).delete(old)
        if listed:
            log.info(
                "snapshot listed", node=self._node_id, position=str(position), at=info.location
            )
        point = truncation_point(meta.snapshots)
        if point is not None and meta.last_ledger_id is not None:
            # A leader's snapshot may lie past what readers see yet of the ledger it writes,
            # a point truncation refuses; truncation keeps that ledger whatever the point
            # inside it, so its start removes the same ledgers.
            point = min(point, ledger_start(meta.last_ledger_id))
        if self._policy.truncate and point is not None:
            await self._log.truncate(point)
        return info if listed else None

    async def collect_unlisted(self) -> None:
        """Delete snapshot ledgers a crash left unlisted (see
        :func:`~walog.recipes.snapshots.collect_unlisted_snapshots`)."""
        deleted = await collect_unlisted_snapshots(self._log.client, self._log.name)
        if deleted:
            log.info("deleted unlisted snapshot ledgers", log=self._log.name, count=deleted)

    async def restore_newest(self, newer_than: Position | None) -> Position | None:
        """Restore the newest valid snapshot past ``newer_than``; return its position, or
        None when there is none. A corrupt one is skipped for the one before it, with one
        warning line. One that another node dropped while this node read the list (its
        ledger or file deleted) is not corrupt: the list is read again, and the newer
        snapshot that replaced it is restored instead."""
        for _ in range(RESTORE_ATTEMPTS):
            meta = await self._log.metadata()
            restored, dropped = await self._restore_from(meta.snapshots, newer_than)
            if not dropped:
                return restored
        raise SnapshotChurnError(
            f"log {self._log.name!r}: the snapshot list changed under each of "
            f"{RESTORE_ATTEMPTS} restores in a row"
        )

    async def _restore_from(
        self, snapshots: tuple[SnapshotInfo, ...], newer_than: Position | None
    ) -> tuple[Position | None, bool]:
        """Restore the newest valid one of ``snapshots``: (its position or None, whether a
        snapshot was found dropped from the log's list meanwhile)."""
        for info in restore_order(snapshots):
            if newer_than is not None and info.position <= newer_than:
                break
            try:
                data = await self._store_for(info).load(info)
            except (WalogError, OSError) as exc:  # CorruptSnapshotError is a WalogError
                if not await self._still_listed(info):
                    return None, True
                if not isinstance(exc, CorruptSnapshotError):
                    raise
                log.warning("skipping corrupt snapshot", node=self._node_id, error=str(exc))
                continue
            with data:
                self._service.restore(data, info.position)
            self._reset()
            log.info("restored snapshot", node=self._node_id, position=str(info.position))
            return info.position, False
        return None, False

    async def _still_listed(self, info: SnapshotInfo) -> bool:
        return info in (await self._log.metadata()).snapshots


__all__ = ["SnapshotKeeper"]

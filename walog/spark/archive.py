"""``walog archive``: copy a log's closed ledgers to Parquet, then mark them archived.

Layout (:mod:`walog.log.archive_layout`, which the tiered reader reads by too):
``DIR/ledger=<id>/part-*.parquet`` with the data source's columns (plus the ``ledger``
partition column when read back with ``spark.read.parquet(DIR)``).

The archive's root holds its format version (:data:`walog.log.archive_layout.MARKER`),
checked before a run writes anything and published by the first run
(:func:`~walog.spark.archive_publish.publish_marker`).

A run is two-phase so that a crash or a rerun never leaves duplicates or a half-marked
ledger, and so that a power loss never takes archived records the bookies no longer hold:

1. **Intent.** The ledgers to archive (the closed ledgers after ``archived_through``, oldest
   first, stopping at the first one still open) and a fresh id are CAS-written into the log's
   metadata as ``archive_intent``. A run that finds an intent adopts it instead.
2. **Write.** Spark writes the intent's records into ``DIR/_staging/<intent id>/``. A
   staging dir an earlier run sealed is kept; any other is removed and written again.
3. **Publish, then mark** (:mod:`walog.spark.archive_publish`): the staging dir is synced
   and sealed, each ``ledger=<id>`` directory renamed into ``DIR`` (atomic within one
   filesystem) and ``DIR`` synced; only then one CAS advances ``archived_through`` past
   every ledger of the intent and clears the intent. The staging dir goes afterwards.

Retention with ``RetentionPolicy(require_archived=True)`` deletes only ledgers wholly
before ``archived_through``. ``DIR`` must be one filesystem seen by the driver and every
executor (local disk for one host, or a shared mount); the syncs run on the driver (see
docs/spark.md for what they guarantee on a shared mount). File operations go through
:class:`walog.spark.archive_files.ArchiveFiles`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from walog.client import Client, connect
from walog.config import ClientConfig, Timeouts
from walog.errors import MetadataConflictError
from walog.log.archive_layout import LEDGER_ID, PARTITION_COLUMN, STAGING, ledger_dir_name
from walog.log.log_metadata import LogMetadata, read_log, update_log
from walog.log.position import Position, ledger_end, ledger_start
from walog.log.truncation import refresh_closed
from walog.spark.archive_files import ArchiveFiles, LocalFiles, archive_root
from walog.spark.archive_publish import publish, publish_marker, staged_write_finished
from walog.spark.options import BookieAccess
from walog.spark.session import prepare_environment, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclasses.dataclass(frozen=True, slots=True)
class ArchiveIntent:
    """An archive run in progress, as recorded in the log's metadata.

    Attributes:
        intent_id: unique id; names the staging directory.
        ledger_ids: the ledgers being archived, oldest first.
        start: the first position archived.
        through: the position right after the last archived record; becomes
            ``archived_through`` when the run completes.
    """

    intent_id: str
    ledger_ids: tuple[int, ...]
    start: Position
    through: Position

    def to_doc(self) -> dict[str, Any]:
        """The JSON-able record stored in the log's metadata."""
        return {
            "id": self.intent_id,
            "ledgers": list(self.ledger_ids),
            "start": str(self.start),
            "through": str(self.through),
            "created_at": time.time(),
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> ArchiveIntent:
        """Parse :meth:`to_doc`'s record.

        Raises:
            ValueError: the record is malformed.
        """
        try:
            return cls(
                intent_id=str(doc["id"]),
                ledger_ids=tuple(int(x) for x in doc["ledgers"]),
                start=Position.parse(doc["start"]),
                through=Position.parse(doc["through"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed archive intent in log metadata: {doc!r}") from exc


@dataclasses.dataclass(frozen=True, slots=True)
class ArchiveResult:
    """What a run did.

    Attributes:
        ledger_ids: ledgers archived by this run (empty: nothing to do).
        archived_through: the log's archived-through mark afterwards.
        resumed: the run finished an intent an earlier run left behind.
        rows: records written (None when an earlier run had already written them).
        archived_before: the first position after the archived records that a record can
            hold (``LogMetadata.existing_at_or_after`` of ``archived_through``, which
            points one past the last archived entry); None when nothing was ever archived.
    """

    ledger_ids: tuple[int, ...]
    archived_through: Position | None
    resumed: bool
    rows: int | None
    archived_before: Position | None = None


def archivable(meta: LogMetadata) -> list[int]:
    """The ledgers an archive run takes now: closed, after ``archived_through``, oldest first,
    stopping at the first ledger whose end is not recorded (pure)."""
    out: list[int] = []
    for info in meta.ledgers:
        if not info.is_closed:
            break
        end = ledger_end(info.ledger_id, info.last_entry_id)
        if meta.archived_through is not None and end <= meta.archived_through:
            continue
        out.append(info.ledger_id)
    return out


def _new_intent(meta: LogMetadata) -> ArchiveIntent | None:
    ids = archivable(meta)
    if not ids:
        return None
    last = next(i for i in meta.ledgers if i.ledger_id == ids[-1])
    return ArchiveIntent(
        intent_id=uuid.uuid4().hex,
        ledger_ids=tuple(ids),
        start=ledger_start(ids[0]),
        through=ledger_end(last.ledger_id, last.last_entry_id),
    )


class _Archiver:
    """One run of the archive protocol (see the module doc) for one log."""

    def __init__(
        self,
        client: Client,
        log: str,
        root: Path,
        access: BookieAccess | None = None,
        files: ArchiveFiles | None = None,
    ) -> None:
        self.client = client
        self.log = log
        self.root = root
        self.access = access or BookieAccess()
        self.files: ArchiveFiles = files or LocalFiles()
        self.marked: LogMetadata | None = None
        """The log's record as the mark left it."""

    def _run(self, coro: Any) -> Any:
        return self.client.loop_thread.run(coro)

    def claim(self) -> tuple[ArchiveIntent | None, bool]:
        """The intent to carry out, and whether an earlier run left it."""
        self._run(refresh_closed(self.client.async_client, self.log))
        store = self.client.async_client.ctx.store
        fresh: list[ArchiveIntent | None] = [None]

        def mutate(meta: LogMetadata) -> LogMetadata | None:
            if meta.archive_intent is not None:
                return None
            fresh[0] = _new_intent(meta)
            return None if fresh[0] is None else meta.replace(archive_intent=fresh[0].to_doc())

        meta, _ = self._run(update_log(store, self.log, mutate))
        if meta.archive_intent is None:
            return None, False
        intent = ArchiveIntent.from_doc(meta.archive_intent)
        return intent, fresh[0] is None or fresh[0].intent_id != intent.intent_id

    def staging(self, intent: ArchiveIntent) -> Path:
        return self.root / STAGING / intent.intent_id

    def drop_stale_staging(self, keep: ArchiveIntent | None) -> None:
        """Remove staging dirs of runs that finished or were abandoned."""
        base = self.root / STAGING
        for entry in self.files.list_dir(base):
            if keep is None or entry.name != keep.intent_id:
                with contextlib.suppress(OSError):  # tried again by the next run
                    self.files.remove_tree(base / entry.name)

    def write(self, spark: SparkSession, metadata_uri: str, intent: ArchiveIntent) -> int | None:
        """Write the intent's records into its staging dir unless an earlier run left a
        sealed write there (:func:`~walog.spark.archive_publish.staged_write_finished`)."""
        import pyarrow.parquet as pq
        from pyspark.sql import functions as F

        staging = self.staging(intent)
        if staged_write_finished(self.files, staging):
            return None
        self.files.remove_tree(staging)
        reader = (
            spark.read.format("walog")
            .option("metadata", metadata_uri)
            .option("log", self.log)
            .option("startPosition", str(intent.start))
            .option("endPosition", str(intent.through))
        )
        for name, path in self.access.options().items():
            reader = reader.option(name, path)
        frame = reader.load().withColumn(PARTITION_COLUMN, F.col(LEDGER_ID))
        frame.write.partitionBy(PARTITION_COLUMN).parquet(str(staging))
        return sum(int(pq.ParquetFile(p).metadata.num_rows) for p in staging.rglob("*.parquet"))

    def mark(self, intent: ArchiveIntent) -> Position | None:
        """One CAS: advance ``archived_through`` past the intent and clear it."""
        store = self.client.async_client.ctx.store

        def mutate(meta: LogMetadata) -> LogMetadata | None:
            held = meta.archive_intent
            if held is None or held.get("id") != intent.intent_id:
                raise MetadataConflictError(
                    f"log {self.log!r}: archive intent {intent.intent_id} was replaced "
                    "by another archive run; run 'walog archive' once at a time"
                )
            through = intent.through
            if meta.archived_through is not None:
                through = max(through, meta.archived_through)
            return meta.replace(
                archived_through=through,
                archive_intent=None,
                archive_location=str(self.root.resolve()),
            )

        meta, _ = self._run(update_log(store, self.log, mutate))
        self.marked = meta
        return meta.archived_through  # type: ignore[no-any-return]


def archive_log(
    spark: SparkSession,
    metadata_uri: str,
    log: str,
    to: str | os.PathLike[str],
    *,
    progress: bool | None = None,
    timeout: float = 10.0,
    access: BookieAccess | None = None,
    files: ArchiveFiles | None = None,
) -> ArchiveResult:
    """Archive every closed, not yet archived ledger of ``log`` to Parquet under ``to``.

    Registers the ``walog`` data source with ``spark`` if needed. Safe to rerun after a
    failure at any point: it finishes (or redoes) the earlier run's intent first. The
    archived files and directories are synced to disk before the log is marked archived
    (:mod:`walog.spark.archive_publish`).

    Args:
        spark: the session to run the job on.
        metadata_uri: the cluster's metadata store.
        log: the log's name.
        to: the archive root (created if missing).
        progress: show a tqdm progress bar (None: only on a terminal).
        timeout: seconds to connect to the metadata store and per call.
        access: TLS files and token file for bookies that require them (read by the
            driver and by every executor).
        files: the file operations of the publish step (default: :class:`LocalFiles`).

    Raises:
        walog.NewerFormatError: the archive under ``to`` is of a newer format version than
            this walog writes (nothing was written to it).
        ValueError: ``to`` is a URI rather than a directory path, a TLS or token file of
            ``access`` is missing or unreadable, or the archive's version marker is damaged.
        OSError: the archive directory could not be written or synced; nothing was marked.
        walog.NoSuchLogError: the log does not exist.
        walog.MetadataConflictError: another archive run replaced this run's intent.
    """
    from walog.spark import register

    root = archive_root(to)
    register(spark)
    files = files or LocalFiles()
    files.make_dirs(root)
    publish_marker(files, root)  # before anything is claimed or written: refuses a newer one
    access = access or BookieAccess()
    config = ClientConfig(timeouts=Timeouts(metadata=timeout))
    with connect(metadata_uri, timeout=timeout, config=config, **access.connect_kwargs()) as client:
        archiver = _Archiver(client, log, root, access, files)
        intent, resumed = archiver.claim()
        archiver.drop_stale_staging(intent)
        if intent is None:
            meta, _ = client.loop_thread.run(read_log(client.async_client.ctx.store, log))
            before = _existing(meta, meta.archived_through)
            return ArchiveResult((), meta.archived_through, False, None, before)
        # write, seal, one move per ledger, sync the root, mark
        steps = len(intent.ledger_ids) + 4
        with tqdm(
            total=steps,
            desc=f"archive {log}",
            unit="step",
            disable=None if progress is None else not progress,
        ) as bar:
            bar.set_postfix_str(f"writing {len(intent.ledger_ids)} ledgers")
            rows = archiver.write(spark, metadata_uri, intent)

            def step(text: str) -> None:
                bar.update(1)
                bar.set_postfix_str(text)

            through = publish(
                files,
                root,
                archiver.staging(intent),
                [ledger_dir_name(i) for i in intent.ledger_ids],
                lambda: archiver.mark(intent),
                on_step=step,
            )
            bar.update(steps - bar.n)  # a sealed write found by a rerun skips the seal
        with contextlib.suppress(OSError):  # the next run removes it
            files.remove_tree(archiver.staging(intent))
        before = None if archiver.marked is None else _existing(archiver.marked, through)
        return ArchiveResult(intent.ledger_ids, through, resumed, rows, before)


def _existing(meta: LogMetadata, through: Position | None) -> Position | None:
    return None if through is None else meta.existing_at_or_after(through)


__all__ = [
    "ArchiveIntent",
    "ArchiveResult",
    "archivable",
    "archive_log",
    "prepare_environment",
    "spark_session",
]

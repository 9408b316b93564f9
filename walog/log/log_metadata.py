"""A log's metadata record: the ordered ledger list and what retention needs, with CAS.

Stored as JSON at ``layout.log_path(name)``; the store's record version is the CAS token
(docs/protocol.md, "The ledger list": every change of the list is a compare-and-swap). Format 1:

```
{"format": 1,
 "epoch": 3,                         # bumped by every writer takeover
 "ledgers": [{"ledger_id": 7, "state": "CLOSED", "last_entry_id": 41,
              "ctime": 1.7e9, "closed_at": 1.7e9, "size_bytes": 123456}, ...],
 "pending_deletion": [5, 6],         # removed from the list, not yet deleted
 "archived_through": "6:0:0" | null, # every record before it is archived
 "truncated_through": "5:10:0" | null,# every record before it was truncated (deleted)
 "orphans_scanned_below": 9,         # ids below were checked for lost-CAS leftovers
 "cursors": {"billing": "7:12:0"},   # consumer -> next position it will read
 "archive_intent": {...} | null,     # an archive run in progress (walog.spark.archive)
 "snapshots": [{"position": "7:3:0", "ledger_id": 12, "path": null,   # optional, oldest
                "size_bytes": 4096, "checksum": "sha256:...", "created_at": 1.7e9,
                "node": "a"}, ...],
 "sinks": {"etl": 41},              # optional: sink id -> last batch linked (walog.log.sink)
 "sink_queries": {"etl": "6f1c..."}, # optional: sink id -> the streaming query that linked it
 "archive_location": "/data/arch"}   # optional: the archive's root (walog.log.archived)
```

``snapshots`` is written only when the log has some (state-machine snapshots, see
``walog.recipes``), so records without it read as before and older readers ignore it.
Retention never deletes a ledger past the oldest listed snapshot's position. ``sinks``,
``sink_queries`` and ``archive_location`` are likewise written only when set.

``pending_deletion`` is written in the same CAS that removes ledgers from the list, so a
crash between that CAS and the deletions leaves ids that :func:`walog.log.retention`'s
orphan collection still deletes later.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from walog.errors import MetadataConflictError, NoSuchLogError, is_retriable
from walog.log.position import Position, Segment, SegmentState, ledger_start
from walog.metadata.layout import LOGS, log_path
from walog.metadata.store import MetadataStore, NodeExistsError, NodeNotFoundError

LOG_FORMAT = 1
MAX_LOG_NAME_CHARS = 200


def validate_log_name(name: str) -> str:
    """Return ``name`` if it can name a log.

    Raises:
        ValueError: empty, over 200 characters, contains ``/``, ``..`` or a control
            character, or is ``.``.
    """
    if not isinstance(name, str):
        raise ValueError(f"a log name is a str, got {type(name).__name__}")
    if not name:
        raise ValueError("log name is empty")
    if len(name) > MAX_LOG_NAME_CHARS:
        raise ValueError(f"log name is {len(name)} characters; at most {MAX_LOG_NAME_CHARS}")
    if "/" in name:
        raise ValueError(f"log name {name!r} contains '/'")
    if ".." in name or name == ".":
        raise ValueError(f"log name {name!r} contains '..' or is '.'")
    bad = [c for c in name if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0]
    if bad:
        raise ValueError(f"log name {name!r} contains control character {bad[0]!r}")
    return name


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerInfo:
    """One ledger of a log's list.

    ``state`` is CLOSED once the log layer knows the ledger's end (its writer closed it on a
    roll, or a takeover recovered it); ``last_entry_id`` is then its last entry (-1 empty).
    ``closed_at`` is when that became known, ``size_bytes`` the entry bytes it holds (None
    when unknown, e.g. recovered from a crashed writer and not measured yet).
    """

    ledger_id: int
    state: SegmentState = "OPEN"
    last_entry_id: int = -1
    ctime: float = dataclasses.field(default_factory=time.time)
    closed_at: float | None = None
    size_bytes: int | None = None

    @property
    def is_closed(self) -> bool:
        """True when the ledger's end is fixed and recorded."""
        return self.state == "CLOSED"

    def closed(self, last_entry_id: int, size_bytes: int | None, now: float) -> LedgerInfo:
        """This ledger marked CLOSED with its last entry (keeps a known size if not given)."""
        return dataclasses.replace(
            self,
            state="CLOSED",
            last_entry_id=last_entry_id,
            closed_at=now,
            size_bytes=size_bytes if size_bytes is not None else self.size_bytes,
        )

    def segment(self) -> Segment:
        """The public view of this ledger."""
        return Segment(
            ledger_id=self.ledger_id,
            state=self.state,
            first_position=ledger_start(self.ledger_id),
            last_entry_id=self.last_entry_id if self.is_closed else -1,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A durable snapshot of a state built from the log (``walog.recipes``).

    Attributes:
        position: every record before it is in the snapshot; replay resumes here.
        ledger_id: the ledger holding the snapshot's bytes, or None when stored in a file.
        path: the file holding it (a directory store), or None when in a ledger.
        size_bytes: its length.
        checksum: ``"sha256:<hex>"`` of its bytes.
        created_at: wall clock when it was taken (seconds).
        node: the node that took it.
    """

    position: Position
    ledger_id: int | None
    path: str | None
    size_bytes: int
    checksum: str
    created_at: float
    node: str = ""

    def to_doc(self) -> dict[str, Any]:
        """The JSON form (see the module doc)."""
        return {
            "position": str(self.position),
            "ledger_id": self.ledger_id,
            "path": self.path,
            "size_bytes": self.size_bytes,
            "checksum": self.checksum,
            "created_at": self.created_at,
            "node": self.node,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> SnapshotInfo:
        """Parse :meth:`to_doc`'s form."""
        ledger_id = doc.get("ledger_id")
        path = doc.get("path")
        return cls(
            position=Position.parse(doc["position"]),
            ledger_id=None if ledger_id is None else int(ledger_id),
            path=None if path is None else str(path),
            size_bytes=int(doc["size_bytes"]),
            checksum=str(doc["checksum"]),
            created_at=float(doc["created_at"]),
            node=str(doc.get("node", "")),
        )

    @property
    def location(self) -> str:
        """Where its bytes are, for people: ``ledger 12`` or the file path."""
        return f"ledger {self.ledger_id}" if self.ledger_id is not None else str(self.path)


@dataclasses.dataclass(frozen=True, slots=True)
class LogMetadata:
    """The content of a log's metadata record (see the module doc for the JSON)."""

    ledgers: tuple[LedgerInfo, ...] = ()
    epoch: int = 0
    pending_deletion: tuple[int, ...] = ()
    archived_through: Position | None = None
    cursors: dict[str, Position] = dataclasses.field(default_factory=dict)
    truncated_through: Position | None = None
    orphans_scanned_below: int = 0
    """Ledger ids below this were checked for leftovers of lost CAS writes."""
    archive_intent: dict[str, Any] | None = None
    """Opaque to the log layer: the archive job's record of a run in progress."""
    snapshots: tuple[SnapshotInfo, ...] = ()
    """State-machine snapshots, oldest first (positions strictly increasing)."""
    archive_location: str | None = None
    """The archive's root directory (``ledger=<id>/*.parquet``), set by the archive job:
    readers find records that truncation removed from the bookies there."""
    sinks: dict[str, int] = dataclasses.field(default_factory=dict)
    """Sink id -> the last batch id it linked into the list (walog.log.sink): a batch at or
    below it is already in the log and is never linked again."""
    sink_queries: dict[str, str] = dataclasses.field(default_factory=dict)
    """Sink id -> the streaming query whose batch ids ``sinks`` counts (none for a batch job's
    ids): another query's batch ids are not comparable with them."""

    @property
    def ledger_ids(self) -> list[int]:
        """Ledger ids of the list, oldest first."""
        return [info.ledger_id for info in self.ledgers]

    @property
    def last_ledger_id(self) -> int | None:
        """The newest ledger (the one being written), None for an empty log."""
        return self.ledgers[-1].ledger_id if self.ledgers else None

    def index_of(self, ledger_id: int) -> int | None:
        """The list index of a ledger, None when it is not in the list."""
        for i, info in enumerate(self.ledgers):
            if info.ledger_id == ledger_id:
                return i
        return None

    def replace(self, **changes: Any) -> LogMetadata:
        """A copy with some fields replaced."""
        return dataclasses.replace(self, **changes)

    def with_ledger(self, info: LedgerInfo) -> LogMetadata:
        """A copy where the list entry of ``info.ledger_id`` is replaced by ``info``."""
        return self.replace(
            ledgers=tuple(info if x.ledger_id == info.ledger_id else x for x in self.ledgers)
        )

    def to_json(self) -> bytes:
        """Serialise for the metadata store."""
        doc = {
            "format": LOG_FORMAT,
            "epoch": self.epoch,
            "ledgers": [dataclasses.asdict(info) for info in self.ledgers],
            "pending_deletion": list(self.pending_deletion),
            "archived_through": _text(self.archived_through),
            "cursors": {k: str(v) for k, v in sorted(self.cursors.items())},
            "truncated_through": _text(self.truncated_through),
            "orphans_scanned_below": self.orphans_scanned_below,
            "archive_intent": self.archive_intent,
        }
        if self.snapshots:
            doc["snapshots"] = [info.to_doc() for info in self.snapshots]
        if self.sinks:
            doc["sinks"] = dict(sorted(self.sinks.items()))
        if self.sink_queries:
            doc["sink_queries"] = dict(sorted(self.sink_queries.items()))
        if self.archive_location is not None:
            doc["archive_location"] = self.archive_location
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LogMetadata:
        """Parse a record written by :meth:`to_json`.

        Raises:
            ValueError: not a log record of a format this version reads.
        """
        try:
            doc = json.loads(raw)
            fmt = doc.get("format")
            if fmt != LOG_FORMAT:
                raise ValueError(f"log metadata format {fmt!r} is not supported")
            return cls(
                ledgers=tuple(LedgerInfo(**info) for info in doc.get("ledgers", [])),
                epoch=int(doc.get("epoch", 0)),
                pending_deletion=tuple(int(x) for x in doc.get("pending_deletion", [])),
                archived_through=_position(doc.get("archived_through")),
                cursors={k: Position.parse(v) for k, v in doc.get("cursors", {}).items()},
                truncated_through=_position(doc.get("truncated_through")),
                orphans_scanned_below=int(doc.get("orphans_scanned_below", 0)),
                archive_intent=doc.get("archive_intent"),
                snapshots=tuple(SnapshotInfo.from_doc(x) for x in doc.get("snapshots", [])),
                sinks={str(k): int(v) for k, v in doc.get("sinks", {}).items()},
                sink_queries={str(k): str(v) for k, v in doc.get("sink_queries", {}).items()},
                archive_location=doc.get("archive_location"),
            )
        except (TypeError, AttributeError, KeyError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed log metadata: {exc}") from exc


def _text(position: Position | None) -> str | None:
    return None if position is None else str(position)


def _position(text: str | None) -> Position | None:
    return None if text is None else Position.parse(text)


async def read_log(store: MetadataStore, name: str) -> tuple[LogMetadata, int]:
    """The log's metadata and its version.

    Raises:
        NoSuchLogError: the log does not exist.
    """
    try:
        raw, version = await store.get(log_path(validate_log_name(name)))
    except NodeNotFoundError as exc:
        raise NoSuchLogError(f"log {name!r} does not exist") from exc
    return LogMetadata.from_json(raw), version


async def create_log(store: MetadataStore, name: str) -> tuple[LogMetadata, int]:
    """Create an empty log unless it exists; return its metadata and version either way."""
    validate_log_name(name)
    meta = LogMetadata()
    try:
        version = await store.create(log_path(name), meta.to_json())
    except NodeExistsError:
        return await read_log(store, name)
    return meta, version


async def write_log(store: MetadataStore, name: str, meta: LogMetadata, version: int) -> int:
    """CAS the log's metadata; return the new version.

    Raises:
        MetadataConflictError: ``version`` is stale.
        NoSuchLogError: the log was deleted.
    """
    try:
        return await store.set(log_path(name), meta.to_json(), version)
    except NodeNotFoundError as exc:
        raise NoSuchLogError(f"log {name!r} was deleted") from exc


def cas_retrying(attempts: int = 50, also: type[BaseException] | None = None) -> AsyncRetrying:
    """Retry policy for read-modify-CAS loops: retriable errors (and ``also``), jittered
    backoff, the last error re-raised."""

    def retry(exc: BaseException) -> bool:
        return is_retriable(exc) or (also is not None and isinstance(exc, also))

    return AsyncRetrying(
        retry=retry_if_exception(retry),
        wait=wait_random_exponential(multiplier=0.005, max=0.5),
        stop=stop_after_attempt(attempts),
        reraise=True,
    )


Mutation = Callable[[LogMetadata], LogMetadata | None]
"""Computes the new metadata from the current one; None means "nothing to change"."""


async def update_log(store: MetadataStore, name: str, mutate: Mutation) -> tuple[LogMetadata, int]:
    """Read-modify-CAS until it sticks; return the metadata and version now stored.

    ``mutate`` runs again on fresh metadata after every lost CAS, so it must decide from
    its argument only. When it returns None nothing is written.
    """
    async for attempt in cas_retrying():
        with attempt:
            meta, version = await read_log(store, name)
            new = mutate(meta)
            if new is None:
                return meta, version
            version = await write_log(store, name, new, version)
            return new, version
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


async def mark_archived(store: MetadataStore, name: str, position: Position) -> LogMetadata:
    """Record that every record of log ``name`` before ``position`` is archived (CAS).

    Retention with ``require_archived`` deletes only ledgers wholly before this position.
    The mark only moves forward: an older position than the stored one changes nothing.
    """

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        if meta.archived_through is not None and meta.archived_through >= position:
            return None
        return meta.replace(archived_through=position)

    return (await update_log(store, name, mutate))[0]


async def commit_cursor(
    store: MetadataStore, name: str, consumer: str, position: Position | None
) -> LogMetadata:
    """Record consumer ``consumer``'s cursor on log ``name`` (CAS); None removes it.

    ``position`` is the next position the consumer will read: every record before it is
    consumed. Retention never deletes a ledger a registered cursor has not passed.
    """
    if not consumer:
        raise ValueError("cursor name is empty")

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        cursors = dict(meta.cursors)
        if position is None:
            if consumer not in cursors:
                return None
            del cursors[consumer]
        else:
            cursors[consumer] = position
        return meta.replace(cursors=cursors)

    return (await update_log(store, name, mutate))[0]


async def list_logs(store: MetadataStore) -> list[str]:
    """Names of all logs, sorted."""
    return await store.children(LOGS)


async def delete_log_record(
    store: MetadataStore, name: str, delete_ledger: Callable[[int], Awaitable[None]]
) -> None:
    """Delete a log: its ledgers (and pending deletions), then its record.

    Raises:
        NoSuchLogError: the log does not exist.
    """
    meta, version = await read_log(store, name)
    for ledger_id in (*meta.pending_deletion, *meta.ledger_ids):
        await delete_ledger(ledger_id)
    try:
        await store.delete(log_path(name), version)
    except NodeNotFoundError as exc:
        raise NoSuchLogError(f"log {name!r} does not exist") from exc
    except MetadataConflictError:
        # A writer changed the list meanwhile: delete what it added too.
        await delete_log_record(store, name, delete_ledger)


__all__ = [
    "LOG_FORMAT",
    "LedgerInfo",
    "LogMetadata",
    "Mutation",
    "SnapshotInfo",
    "cas_retrying",
    "commit_cursor",
    "create_log",
    "delete_log_record",
    "list_logs",
    "mark_archived",
    "read_log",
    "update_log",
    "validate_log_name",
    "write_log",
]

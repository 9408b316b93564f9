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
 "archive_location": "/data/arch",  # optional: the archive's root (walog.log.archived)
 "ledger_times": {"7": [1.7e9, 1.7e9]},  # optional: ledger id -> timestamps of its
                                     # first and last records, for CLOSED ledgers
 "config": {"ensemble_size": 3, ..., "retention": {"max_age": 604800.0, ...}},
                                     # optional: the log's settings (walog.log.log_config)
 "producers": {"format": 1, "last": "7:12:0", "producers": {"svc-7": {...}}}}
                                     # optional: producer sessions (walog.log.producers)
```

``producers`` is the producer table a writer with producer sessions carries forward at
every roll: per producer its last seq and the positions of its recent records, and the
position of the last record the table covers (walog.log.producers has its form and bounds;
a takeover adds the records after that position, walog.log.sessions). Written only by such
writers; older releases ignore it.

``snapshots`` is written only when the log has some (state-machine snapshots, see
``walog.recipes``), so records without it read as before and older readers ignore it.
Retention never deletes a ledger past the oldest listed snapshot's position. ``sinks``,
``sink_queries``, ``archive_location`` and ``config`` are likewise written only when set; a
record without ``config`` belongs to a log created before logs kept their settings, and
uses the defaults.

``ledger_times`` (``LedgerInfo.first_timestamp`` and ``last_timestamp``) is kept beside the
list rather than in its items, so releases that do not know it still read the record (they
refuse unknown keys in a ledger's item, and ignore unknown fields of the record). It is
derived from the ledgers' own records and only saves reads (walog.log.time_search): a
record without it, or with an item that does not parse, reads as ledgers whose range is
unknown, and an item is dropped when its ledger leaves the list or an older release
rewrites the record.

A mark that does not parse (a cursor, a snapshot, ``archived_through`` ...) does not make the
record unreadable: it is set aside in ``damaged``, written back unchanged until replaced or
repaired (:func:`repair_log`), and named by every view (walog.log.damaged).

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

from walog.errors import MetadataConflictError, NewerFormatError, NoSuchLogError, is_retriable
from walog.format_versions import check_version
from walog.log.damaged import HOLDS_DATA, DamagedField, Fields, without, write_back
from walog.log.position import Position, Segment, SegmentState, ledger_start, position_argument
from walog.log.producers import parse_table_doc
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
    ``first_timestamp`` and ``last_timestamp`` are the timestamps of its first and last
    records once CLOSED and not empty (None when not recorded: a ledger closed by an older
    release, or linked by a sink).
    """

    ledger_id: int
    state: SegmentState = "OPEN"
    last_entry_id: int = -1
    ctime: float = dataclasses.field(default_factory=time.time)
    closed_at: float | None = None
    size_bytes: int | None = None
    first_timestamp: float | None = None
    last_timestamp: float | None = None

    @property
    def time_range(self) -> tuple[float, float] | None:
        """``(first_timestamp, last_timestamp)`` when both are recorded, else None."""
        if self.first_timestamp is None or self.last_timestamp is None:
            return None
        return self.first_timestamp, self.last_timestamp

    def with_times(self, times: tuple[float, float] | None) -> LedgerInfo:
        """This ledger with its records' time range (unchanged when ``times`` is None)."""
        if times is None:
            return self
        return dataclasses.replace(self, first_timestamp=times[0], last_timestamp=times[1])

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
    config: dict[str, Any] | None = None
    """The log's stored settings as JSON (``walog.log.log_config.LogConfig.to_doc``); None
    for a log created before logs kept their settings. Kept unparsed here: the settings
    are parsed where they are used (``walog.log.log_config.stored_config``), so a record
    whose settings this version cannot read still serves everything else."""
    producers: dict[str, Any] | None = None
    """The producer table as JSON (``walog.log.producers.ProducerTable.to_doc``), None when
    no writer with producer sessions stored one; parsed by the takeover that uses it."""
    damaged: tuple[DamagedField, ...] = ()
    """Stored fields that do not parse, oldest first: kept out of the fields above, written
    back unchanged until replaced or repaired (walog.log.damaged)."""

    @property
    def damage_holding_data(self) -> list[DamagedField]:
        """Damaged fields that may protect records from deletion: while there are any,
        retention deletes nothing."""
        return [d for d in self.damaged if d.field in HOLDS_DATA]

    def existing_at_or_after(self, position: Position) -> Position:
        """The first position at or after ``position`` that a record can hold.

        Marks such as ``truncated_through`` and ``archived_through`` point one past the last
        record they cover (``ledger_end``: an entry the ledger never had); people are shown
        where the next record is instead: the start of the next listed ledger. A position
        past the log's last closed ledger comes back unchanged.
        """
        for info in self.ledgers:
            if info.ledger_id < position.ledger_id:
                continue
            if info.ledger_id > position.ledger_id:
                return ledger_start(info.ledger_id)
            if not info.is_closed or position.entry_id <= info.last_entry_id:
                return position
        return position

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
            "ledgers": [_ledger_doc(info) for info in self.ledgers],
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
        times = {str(i.ledger_id): list(r) for i in self.ledgers if (r := i.time_range)}
        if times:
            doc["ledger_times"] = times
        if self.config is not None:
            doc["config"] = self.config
        if self.producers is not None:
            doc["producers"] = self.producers
        write_back(doc, self.damaged)
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, name: str | None = None) -> LogMetadata:
        """Parse a record written by :meth:`to_json` (``name``: the log's, for errors).

        The format, the epoch and the ledger list must parse; any other field that does
        not is set aside in ``damaged`` (the rest is kept).

        Raises:
            NewerFormatError: the record's format is newer than :data:`LOG_FORMAT` (the
                message names both versions).
            ValueError: not a log record, or its epoch or ledger list does not parse (the
                message names the field).
        """
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"malformed log metadata: not JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise ValueError("malformed log metadata: not a JSON object")
        what = "a log's record" if name is None else f"log {name!r}'s record"
        check_version(what, doc.get("format"), LOG_FORMAT, ValueError, newer=NewerFormatError)
        try:
            ledgers = tuple(LedgerInfo(**info) for info in doc.get("ledgers", []))
            times = _ledger_times(doc.get("ledger_times"))
            ledgers = tuple(info.with_times(times.get(info.ledger_id)) for info in ledgers)
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"malformed log metadata: field 'ledgers': {exc}") from exc
        try:
            epoch = _int(doc.get("epoch", 0))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed log metadata: field 'epoch': {exc}") from exc
        fields = Fields(doc)
        meta = cls(
            ledgers=ledgers,
            epoch=epoch,
            pending_deletion=fields.sequence("pending_deletion", _int),
            archived_through=fields.one("archived_through", _position, None),
            cursors=fields.mapping("cursors", Position.parse),
            truncated_through=fields.one("truncated_through", _position, None),
            orphans_scanned_below=fields.one("orphans_scanned_below", _int, 0),
            archive_intent=fields.one("archive_intent", _object, None),
            snapshots=fields.sequence("snapshots", SnapshotInfo.from_doc),
            sinks=fields.mapping("sinks", _int),
            sink_queries=fields.mapping("sink_queries", _str),
            archive_location=fields.one("archive_location", _optional_str, None),
            config=fields.one("config", _object, None),
            producers=fields.one("producers", parse_table_doc, None),
        )
        return meta.replace(damaged=tuple(fields.damaged)) if fields.damaged else meta


_TIME_FIELDS = ("first_timestamp", "last_timestamp")


def _ledger_doc(info: LedgerInfo) -> dict[str, Any]:
    """A ledger's item of the list; its time range goes to ``ledger_times``."""
    doc = dataclasses.asdict(info)
    for field in _TIME_FIELDS:
        del doc[field]
    return doc


def _ledger_times(raw: Any) -> dict[int, tuple[float, float]]:
    """``ledger_times`` parsed; what does not parse is left out (the ranges only save
    reads: a ledger without one has its records read instead)."""
    out: dict[int, tuple[float, float]] = {}
    if not isinstance(raw, dict):
        return out
    for key, value in raw.items():
        if (
            isinstance(key, str)
            and key.isascii()
            and key.isdigit()
            and isinstance(value, list)
            and len(value) == 2
            and all(type(v) in (int, float) for v in value)
            and value[0] <= value[1]
        ):
            out[int(key)] = (float(value[0]), float(value[1]))
    return out


def _text(position: Position | None) -> str | None:
    return None if position is None else str(position)


def _position(text: str | None) -> Position | None:
    return None if text is None else Position.parse(text)


def _int(value: Any) -> int:
    if type(value) is not int:
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r}")
    return value


def _optional_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _object(value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {value!r}")
    return value


async def read_log(store: MetadataStore, name: str) -> tuple[LogMetadata, int]:
    """The log's metadata and its version.

    Raises:
        NoSuchLogError: the log does not exist.
    """
    try:
        raw, version = await store.get(log_path(validate_log_name(name)))
    except NodeNotFoundError as exc:
        raise NoSuchLogError(f"log {name!r} does not exist") from exc
    return LogMetadata.from_json(raw, name), version


async def create_log(
    store: MetadataStore, name: str, config: dict[str, Any] | None = None
) -> tuple[LogMetadata, int]:
    """Create an empty log unless it exists; return its metadata and version either way.

    ``config``: the settings a new log stores (``LogConfig.to_doc``); an existing log keeps
    its own."""
    validate_log_name(name)
    meta = LogMetadata(config=config)
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


async def mark_archived(store: MetadataStore, name: str, position: Position | str) -> LogMetadata:
    """Record that every record of log ``name`` before ``position`` is archived (CAS).

    Retention with ``require_archived`` deletes only ledgers wholly before this position.
    The mark only moves forward: an older position than the stored one changes nothing.
    A damaged stored mark is replaced.

    Raises:
        TypeError: ``position`` is not a Position or text.
        ValueError: ``position`` is text that does not parse, or lies past the log's end.
    """
    checked = position_argument(position, "position")

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        if meta.archived_through is not None and meta.archived_through >= checked:
            return None
        _check_within(meta, name, checked, "position")
        return meta.replace(
            archived_through=checked, damaged=without(meta.damaged, "archived_through")
        )

    return (await update_log(store, name, mutate))[0]


async def commit_cursor(
    store: MetadataStore, name: str, consumer: str, position: Position | str | None
) -> LogMetadata:
    """Record consumer ``consumer``'s cursor on log ``name`` (CAS); None removes it.

    ``position`` is the next position the consumer will read: every record before it is
    consumed. Retention never deletes a ledger a registered cursor has not passed. A damaged
    stored cursor of that name is replaced (or removed).

    Raises:
        TypeError: ``consumer`` is not text, or ``position`` not a Position, text or None.
        ValueError: ``consumer`` is empty, or ``position`` is text that does not parse or
            lies past the log's end.
    """
    if not isinstance(consumer, str):
        raise TypeError(f"consumer must be a str, got {type(consumer).__name__} {consumer!r}")
    if not consumer:
        raise ValueError("consumer: the cursor name is empty")
    checked = None if position is None else position_argument(position, "position")

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        cursors = dict(meta.cursors)
        damaged = without(meta.damaged, "cursors", consumer)
        if checked is None:
            if consumer not in cursors and damaged == meta.damaged:
                return None
            cursors.pop(consumer, None)
        else:
            _check_within(meta, name, checked, "position")
            cursors[consumer] = checked
        return meta.replace(cursors=cursors, damaged=damaged)

    return (await update_log(store, name, mutate))[0]


def _check_within(meta: LogMetadata, name: str, position: Position, argument: str) -> None:
    """Refuse a mark in a ledger newer than the log's newest: it would claim records that
    do not exist yet, and retention would later delete them on its word."""
    newest = max(
        meta.last_ledger_id or 0,
        0 if meta.truncated_through is None else meta.truncated_through.ledger_id,
    )
    if position.ledger_id > newest:
        end = "is empty" if meta.last_ledger_id is None else f"ends in ledger {newest}"
        raise ValueError(f"{argument}: {position} is past the end of log {name!r} (it {end})")


async def repair_log(store: MetadataStore, name: str) -> list[DamagedField]:
    """Remove the fields of log ``name``'s record that do not parse (CAS); return them.

    Each is logged beforehand by every view (``walog log show``, ``walog status``); what it
    held is gone afterwards (a cursor commits again, the archive job sets its mark again).
    """
    removed: list[DamagedField] = []

    def mutate(meta: LogMetadata) -> LogMetadata | None:
        removed[:] = meta.damaged
        return meta.replace(damaged=()) if meta.damaged else None

    await update_log(store, name, mutate)
    return removed


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
    "DamagedField",
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
    "repair_log",
    "update_log",
    "validate_log_name",
    "write_log",
]

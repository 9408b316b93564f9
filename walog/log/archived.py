"""Reading archived ledgers back: the records truncation removed from the bookies.

The archive job (``walog.spark.archive``) writes each closed ledger whole to
``ROOT/ledger=<id>/*.parquet`` (the layout and columns of :mod:`walog.log.archive_layout`),
advances the log's ``archived_through`` and records ``ROOT`` as its ``archive_location``.
Ledgers archived and then truncated are read from there: the files are turned back into
the ledger's entries (records in slot order), so every reader handles them like entries
read from bookies, with the same positions.

Archiving moves through the ledger list in order from its first run on, so the archived
ledgers cover every record from the first of them up to ``archived_through``. Records that
are neither there nor on the bookies (truncated before archiving began, or truncated past
``archived_through`` by hand) are lost.

Both readers here check the archive's format version first
(:func:`walog.log.archive_layout.check_archive`): an archive of a newer version is refused
with :class:`walog.errors.NewerFormatError` naming both versions, never guessed at.

Needs ``pyarrow`` (the ``spark`` extra), imported only when an archive is read.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Any

from walog.ledger.entry import Entry
from walog.log.archive_layout import (
    DATA,
    ENTRY_ID,
    SLOT,
    TIMESTAMP,
    check_archive,
    ledger_of_dir,
    parquet_files,
)
from walog.log.log_metadata import LogMetadata
from walog.log.position import Position, ledger_end, ledger_start
from walog.log.records import encode_records

_TICKS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@dataclasses.dataclass(frozen=True, slots=True)
class ArchivedLedger:
    """A ledger held by the archive only: entries ``0..last_entry_id``."""

    ledger_id: int
    last_entry_id: int

    @property
    def end(self) -> Position:
        """The first position after its records."""
        return ledger_end(self.ledger_id, self.last_entry_id)


def _parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeError(
            "reading archived records needs pyarrow: pip install 'walog[spark]'"
        ) from exc
    return pq


def _table(location: str, ledger_id: int, columns: list[str] | None = None) -> Any:
    pq = _parquet()
    import pyarrow as pa

    tables = [pq.read_table(f, columns=columns) for f in parquet_files(location, ledger_id)]
    return pa.concat_tables(tables) if tables else None


def archived_only(meta: LogMetadata) -> list[ArchivedLedger]:
    """The ledgers of log ``meta`` that only the archive holds, oldest first.

    Those below the first listed ledger with a directory in the archive, ending at or
    before ``archived_through``; [] without an archive.

    Raises:
        walog.errors.NewerFormatError: the archive is of a newer format version.
        ValueError: the archive's version marker is damaged.
    """
    location = meta.archive_location
    if location is None or meta.archived_through is None or not os.path.isdir(location):
        return []
    check_archive(location)
    first = meta.ledgers[0].ledger_id if meta.ledgers else None
    ids = sorted(i for i in map(ledger_of_dir, os.listdir(location)) if i is not None)
    out: list[ArchivedLedger] = []
    for ledger_id in ids:
        if first is not None and ledger_id >= first:
            break
        if ledger_start(ledger_id) >= meta.archived_through:
            break
        table = _table(location, ledger_id, [ENTRY_ID])
        if table is None or table.num_rows == 0:
            continue
        import pyarrow.compute as pc

        out.append(ArchivedLedger(ledger_id, int(pc.max(table.column(ENTRY_ID)).as_py())))
    return out


def archive_covers(meta: LogMetadata) -> bool:
    """True when nothing was truncated past the archive: every record before the first
    listed ledger and after the first archived one is in the archive."""
    gone = meta.truncated_through
    return gone is None or (meta.archived_through is not None and meta.archived_through >= gone)


def archived_entries(location: str, ledger_id: int, first: int, last: int) -> list[Entry]:
    """Entries ``first..last`` of an archived ledger, rebuilt from its records.

    Raises:
        walog.errors.NewerFormatError: the archive is of a newer format version.
        ValueError: the archive's version marker is damaged.
    """
    check_archive(location)
    table = _table(location, ledger_id, [ENTRY_ID, SLOT, TIMESTAMP, DATA])
    if table is None:
        return []
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = pc.and_(
        pc.greater_equal(table.column(ENTRY_ID), first),
        pc.less_equal(table.column(ENTRY_ID), last),
    )
    table = table.filter(keep).sort_by([(ENTRY_ID, "ascending"), (SLOT, "ascending")])
    entry_ids = table.column(ENTRY_ID).to_pylist()
    # Spark writes the timestamps in whatever unit its Parquet settings say.
    per_second = _TICKS_PER_SECOND[table.schema.field(TIMESTAMP).type.unit]
    ticks = table.column(TIMESTAMP).cast(pa.int64()).to_pylist()
    data = table.column(DATA).to_pylist()
    entries: list[Entry] = []
    rows = zip(entry_ids, ticks, data, strict=True)
    for entry_id, group in itertools.groupby(rows, key=lambda row: row[0]):
        records = [(ts / per_second, bytes(payload)) for _, ts, payload in group]
        entries.append(Entry(ledger_id, entry_id, encode_records(records)))
    return entries


def archived_time_range(location: str, ledger_id: int) -> tuple[int, int] | None:
    """The first and last timestamps (in microseconds) of an archived ledger's records from
    the Parquet statistics of the timestamp column (the files' footers only); None when a
    file has none (Spark's INT96 timestamps carry none) or holds no row: then the rows tell
    (:func:`archived_stamps`).

    Raises:
        walog.errors.NewerFormatError: the archive is of a newer format version.
    """
    check_archive(location)
    pq = _parquet()
    low: list[int] = []
    high: list[int] = []
    for path in parquet_files(location, ledger_id):
        meta = pq.ParquetFile(path)
        per_micro = _TICKS_PER_SECOND[meta.schema_arrow.field(TIMESTAMP).type.unit] / 1_000_000
        index = meta.schema_arrow.get_field_index(TIMESTAMP)
        for group in range(meta.metadata.num_row_groups):
            column = meta.metadata.row_group(group).column(index)
            stats = column.statistics
            if column.physical_type != "INT64" or stats is None or not stats.has_min_max:
                return None
            if meta.metadata.row_group(group).num_rows:
                low.append(_to_micros(stats.min_raw, per_micro))
                high.append(_to_micros(stats.max_raw, per_micro))
    return (min(low), max(high)) if low else None


def _to_micros(ticks: int, per_micro: float) -> int:
    return round(ticks / per_micro) if per_micro != 1 else int(ticks)


def archived_stamps(location: str, ledger_id: int) -> dict[int, list[int]]:
    """An archived ledger's record timestamps in microseconds, by entry (slot order).

    Raises:
        walog.errors.NewerFormatError: the archive is of a newer format version.
    """
    check_archive(location)
    table = _table(location, ledger_id, [ENTRY_ID, SLOT, TIMESTAMP])
    out: dict[int, list[int]] = {}
    if table is None:
        return out
    import pyarrow as pa

    table = table.sort_by([(ENTRY_ID, "ascending"), (SLOT, "ascending")])
    per_micro = _TICKS_PER_SECOND[table.schema.field(TIMESTAMP).type.unit] / 1_000_000
    ticks = table.column(TIMESTAMP).cast(pa.int64()).to_pylist()
    for entry_id, tick in zip(table.column(ENTRY_ID).to_pylist(), ticks, strict=True):
        out.setdefault(entry_id, []).append(_to_micros(tick, per_micro))
    return out


__all__ = [
    "ArchivedLedger",
    "archive_covers",
    "archived_entries",
    "archived_only",
    "archived_stamps",
    "archived_time_range",
]

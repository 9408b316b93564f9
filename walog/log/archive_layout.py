"""Where the archive keeps a log's records and in which columns: the one definition.

The archive job (``walog.spark.archive``) writes it, the tiered reader
(:mod:`walog.log.archived`) and the Spark data source read it; each of them takes the
directory names and the columns from here.

- ``ROOT/ledger=<id>/*.parquet``: one directory per archived ledger, named after
  :data:`PARTITION_COLUMN` (Spark's ``partitionBy`` spelling, so ``spark.read.parquet(ROOT)``
  gives the ledger back as a column); the job's work in progress is under
  ``ROOT/_staging`` (:data:`STAGING`), which readers never look into.
- :data:`COLUMNS`: one row per record, ``ledger_id, entry_id, slot, timestamp, data``,
  the Spark data source's rows (:data:`SCHEMA_DDL`; :func:`arrow_schema` in Arrow types).
  Readers accept any unit of ``timestamp`` (Spark writes whichever its Parquet settings
  say).
- ``ROOT/_walog_archive.json`` (:data:`MARKER`): the archive's format version,
  ``{"format": 1}`` (:data:`ARCHIVE_FORMAT`), written by the archive job when it finds
  none. Every reader of the archive checks it first (:func:`check_archive`): a newer
  version is refused with one error naming both versions; an archive without the marker
  was written before it existed and is version 1.

Plain names and paths, no pyarrow: the reader imports it only when an archive is read.
"""

from __future__ import annotations

import json
import os
from typing import Any

from walog.errors import NewerFormatError
from walog.format_versions import check_version

PARTITION_COLUMN = "ledger"
"""The column the archive job partitions by: a ledger's directory is ``ledger=<id>``."""
STAGING = "_staging"
"""The archive job's work in progress under the root (``_staging/<intent id>/``; Spark and
the readers skip ``_`` paths)."""

LEDGER_ID, ENTRY_ID, SLOT, TIMESTAMP, DATA = "ledger_id", "entry_id", "slot", "timestamp", "data"
COLUMNS: tuple[tuple[str, str], ...] = (
    (LEDGER_ID, "long"),
    (ENTRY_ID, "long"),
    (SLOT, "int"),
    (TIMESTAMP, "timestamp"),
    (DATA, "binary"),
)
"""The columns of a record's row and their Spark types, in order."""
SCHEMA_DDL = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
"""The same columns as Spark DDL (the data source's schema)."""

ARCHIVE_FORMAT = 1
"""The archive's format version: its layout and columns, as above."""
MARKER = "_walog_archive.json"
"""The file at the archive's root that holds its format version (Spark skips ``_`` files)."""

_PREFIX = f"{PARTITION_COLUMN}="


def ledger_dir_name(ledger_id: int) -> str:
    """The name of ledger ``ledger_id``'s directory: ``ledger=<id>``."""
    return f"{_PREFIX}{ledger_id}"


def ledger_dir(root: str | os.PathLike[str], ledger_id: int) -> str:
    """The path of ledger ``ledger_id``'s directory under the archive ``root``."""
    return os.path.join(root, ledger_dir_name(ledger_id))


def ledger_of_dir(name: str) -> int | None:
    """The ledger id a directory name stands for; None for any other name."""
    if not name.startswith(_PREFIX):
        return None
    digits = name[len(_PREFIX) :]
    return int(digits) if digits.isdigit() else None


def parquet_files(root: str | os.PathLike[str], ledger_id: int) -> list[str]:
    """The Parquet files of ledger ``ledger_id`` under ``root``, sorted ([] when none)."""
    directory = ledger_dir(root, ledger_id)
    if not os.path.isdir(directory):
        return []
    names = (name for name in os.listdir(directory) if name.endswith(".parquet"))
    return sorted(os.path.join(directory, name) for name in names)


def marker_bytes() -> bytes:
    """The contents of the marker of an archive of this version: ``{"format": 1}``."""
    return json.dumps({"format": ARCHIVE_FORMAT}).encode()


def marker_format(root: str | os.PathLike[str], raw: bytes | None) -> int:
    """The format version of the archive at ``root`` whose marker holds ``raw`` (None: no
    marker, an archive written before the marker existed: version 1).

    Raises:
        NewerFormatError: the version is newer than :data:`ARCHIVE_FORMAT` (the message
            names both).
        ValueError: the marker is damaged (not a JSON object with a version).
    """
    what = f"archive {os.fspath(root)}"
    if raw is None:
        return 1
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: its marker {MARKER} is not JSON (damaged?): {exc}") from exc
    found = doc.get("format") if isinstance(doc, dict) else None
    return check_version(what, found, ARCHIVE_FORMAT, ValueError, newer=NewerFormatError)


def check_archive(root: str | os.PathLike[str]) -> int:
    """The format version of the archive at ``root``, read from its marker on the disk;
    what every reader of the archive calls before it reads anything else.

    Raises:
        NewerFormatError: the archive is of a newer version than this walog reads.
        ValueError: its marker is damaged.
        OSError: the marker exists but cannot be read.
    """
    try:
        with open(os.path.join(root, MARKER), "rb") as marker:
            raw: bytes | None = marker.read()
    except FileNotFoundError:
        raw = None
    return marker_format(root, raw)


def arrow_schema() -> Any:
    """:data:`COLUMNS` as a ``pyarrow.Schema``: ``int64``, ``int64``, ``int32``,
    ``timestamp[us, tz=UTC]`` and ``binary``, the types Spark checks a Python data source's
    batches against (imports pyarrow)."""
    import pyarrow as pa

    types = {
        "long": pa.int64(),
        "int": pa.int32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "binary": pa.binary(),
    }
    return pa.schema([pa.field(name, types[kind], nullable=True) for name, kind in COLUMNS])


__all__ = [
    "ARCHIVE_FORMAT",
    "COLUMNS",
    "DATA",
    "ENTRY_ID",
    "LEDGER_ID",
    "MARKER",
    "PARTITION_COLUMN",
    "SCHEMA_DDL",
    "SLOT",
    "STAGING",
    "TIMESTAMP",
    "arrow_schema",
    "check_archive",
    "ledger_dir",
    "ledger_dir_name",
    "ledger_of_dir",
    "marker_bytes",
    "marker_format",
    "parquet_files",
]

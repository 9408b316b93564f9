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

Plain names and paths, no pyarrow: the reader imports it only when an archive is read.
"""

from __future__ import annotations

import os
from typing import Any

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
    "COLUMNS",
    "DATA",
    "ENTRY_ID",
    "LEDGER_ID",
    "PARTITION_COLUMN",
    "SCHEMA_DDL",
    "SLOT",
    "STAGING",
    "TIMESTAMP",
    "arrow_schema",
    "ledger_dir",
    "ledger_dir_name",
    "ledger_of_dir",
    "parquet_files",
]

"""The archive's format version: its marker at the root is checked by every reader of the
archive and by the archive job before it writes; an archive without one (written before the
marker existed) reads as version 1 (docs/compatibility.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from walog.errors import NewerFormatError
from walog.log.archive_layout import (
    ARCHIVE_FORMAT,
    MARKER,
    arrow_schema,
    check_archive,
    ledger_dir,
)
from walog.log.archived import ArchivedLedger, archived_entries, archived_only
from walog.log.log_metadata import LedgerInfo, LogMetadata
from walog.log.position import Position
from walog.log.records import decode_records
from walog.spark.archive_files import LocalFiles
from walog.spark.archive_publish import publish_marker

LEDGER = 3
RECORDS = {0: [b"a", b"b"], 1: [b"c"]}  # entry id -> its records, in slot order


def _archive(root: Path) -> LogMetadata:
    """An archive holding ledger 3 as the archive job writes it (no marker), and the
    metadata of a log that truncated the ledger after archiving it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        (LEDGER, entry, slot, 1_000_000 * (entry + 1), data)
        for entry, records in RECORDS.items()
        for slot, data in enumerate(records)
    ]
    schema = arrow_schema()
    by_column = zip(*rows, strict=True)
    columns = [pa.array(list(c), f.type) for c, f in zip(by_column, schema, strict=True)]
    Path(ledger_dir(root, LEDGER)).mkdir(parents=True)
    pq.write_table(
        pa.Table.from_arrays(columns, schema=schema),
        Path(ledger_dir(root, LEDGER)) / "part-00000.parquet",
    )
    return LogMetadata(
        ledgers=(LedgerInfo(ledger_id=LEDGER + 1),),
        truncated_through=Position(LEDGER + 1, 0, 0),
        archived_through=Position(LEDGER + 1, 0, 0),
        archive_location=str(root),
    )


def _contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_newer_archive_version_is_refused_naming_both_versions(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    meta = _archive(root)
    newer = ARCHIVE_FORMAT + 1
    (root / MARKER).write_text(json.dumps({"format": newer, "a_field_of_the_next_format": 1}))
    before = _contents(root)
    both = re.escape(
        f"archive {root} has format version {newer}; "
        f"this walog reads up to {ARCHIVE_FORMAT}: upgrade walog"
    )
    with pytest.raises(NewerFormatError, match=both):
        archived_only(meta)  # the tiered reader's and the Spark source's plan
    with pytest.raises(NewerFormatError, match=both):
        archived_entries(str(root), LEDGER, 0, 1)  # their reads of a ledger
    with pytest.raises(NewerFormatError, match=both):
        publish_marker(LocalFiles(), root)  # the archive job, before it writes anything
    assert _contents(root) == before


def test_an_archive_without_a_marker_reads_as_version_1(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    meta = _archive(root)
    assert check_archive(root) == 1
    assert archived_only(meta) == [ArchivedLedger(LEDGER, 1)]
    entries = archived_entries(str(root), LEDGER, 0, 1)
    assert [[data for _, data in decode_records(e.data)] for e in entries] == list(RECORDS.values())
    # The archive job appends to it as to an archive of this version, and says so.
    assert publish_marker(LocalFiles(), root) == ARCHIVE_FORMAT
    assert json.loads((root / MARKER).read_bytes()) == {"format": ARCHIVE_FORMAT}
    assert archived_only(meta) == [ArchivedLedger(LEDGER, 1)]


def test_a_damaged_archive_marker_is_damage_not_a_newer_version(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    for raw in (b"{not json", b"[1]", b'{"format": 0}', b"{}"):
        (root / MARKER).write_bytes(raw)
        with pytest.raises(ValueError, match=f"archive {re.escape(str(root))}") as caught:
            check_archive(root)
        assert not isinstance(caught.value, NewerFormatError)

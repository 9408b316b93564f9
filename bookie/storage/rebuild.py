"""``python -m bookie --rebuild-index``: build a new index from the entry logs.

For a bookie whose index (``DATA_DIR/index``, LMDB) is damaged or lost while its entry logs
are intact. The bookie must be stopped. The old index is kept, renamed to
``index.damaged-<UTC time>``; nothing else is moved or deleted.

Every entry log is read record by record; an entry counts when its header is plausible and
its digest matches, so no damaged entry is ever indexed. In a log of batch records (format
3) a record counts when its header's CRC matches, and its entries up to the first damaged
one; a record whose header is damaged is skipped whole (its entries cannot be told apart
from noise without their ledger id), and the scan goes on byte by byte until a record's
header matches again. In a log of one record per entry (formats 1 and 2) a damaged stretch
is skipped byte by byte until records match again. A log whose own header is damaged is
read both ways, and the way that finds more is kept. A log in which nothing matches is
renamed ``NNN.log.unindexed`` (kept for inspection, never read). The new index then holds:

- a run row per run of intact entries of consecutive ids of a ledger lying back to back in
  one log (the first copy of an entry when a compaction left two);
- per ledger: the highest entry id and LAC found, the entries found as synced, and the
  master key **unknown**. The old index held the keys and fences, and without them the
  bookie must not acknowledge a plain add to a ledger that may have been fenced and closed:
  plain adds (and LAC updates, forces) to a ledger of unknown key are answered IO_ERROR,
  so writers move to another bookie, while a fence or a recovery write gives the ledger
  the key it presents (and the fence is then set, as on any ledger);
- the checkpoint mark at the start: the next start replays every journal file there is.
  A ledger whose KEY record is among them gets its key back, and then every later record
  of that ledger (its fence above all) is among them too: the journal is written in order
  and deleted oldest file first. So such a ledger is whole again and takes adds.

Ledgers deleted from the metadata store whose records were still in the entry logs come
back, and the bookie's GC deletes them again (``--gc-interval``).
"""

from __future__ import annotations

import argparse
import dataclasses
import mmap
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import crc32c

from bookie.storage.config import StorageConfig
from bookie.storage.entry_log_writer import (
    BATCH,
    ENTRY_LOG_VERSION,
    LOG_HEADER,
    RECORD,
    log_format,
    records_start,
)
from bookie.storage.entry_storage import EntryStorage, lock_directory
from bookie.storage.files import LOCAL_FILES
from bookie.storage.index import MAX_RUN_ENTRIES, run_row
from bookie.storage.journal_files import JournalMark, StorageIOError
from bookie.storage.ledger_state import LedgerState, SyncCursor
from walog.wire.digest import entry_digest
from walog.wire.packing import ENTRY_HEADER


@dataclasses.dataclass
class RebuildReport:
    """What a rebuild found.

    Attributes:
        kept_index: Where the old index went (None: there was none).
        logs: Entry logs read.
        entries: Entries indexed.
        ledgers: Ledgers indexed.
        skipped_bytes: Bytes of the entry logs that held no intact record.
        unindexed_logs: Logs without one intact record (renamed ``.unindexed``).
    """

    kept_index: Path | None = None
    logs: int = 0
    entries: int = 0
    ledgers: int = 0
    skipped_bytes: int = 0
    unindexed_logs: list[Path] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Ledger:
    lac: int = -1
    entries: list[int] = dataclasses.field(default_factory=list)


def _scan_log(
    path: Path,
    log_id: int,
    max_data: int,
    found: dict[int, _Ledger],
    locations: dict[int, list[tuple[int, int, int, int]]],
    live: dict[int, dict[int, int]],
    seen: set[tuple[int, int]],
) -> tuple[int, int]:
    """Index the intact records of one log (``(entry, log, offset, length)`` by ledger in
    ``locations``); returns ``(records indexed, bytes skipped)``."""
    indexed = 0
    skipped = [0]
    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        if size == 0:
            return 0, 0
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as raw:
            view = memoryview(raw)
            try:
                head = raw[: LOG_HEADER.size]
                start = records_start(head, path)
                fmt = log_format(head, path)
                scans = [_batch_entries] if fmt == ENTRY_LOG_VERSION else [_record_entries]
                if fmt in (None, 1):  # no intact header: whichever format finds more
                    scans = [_batch_entries, _record_entries]
                best: list[tuple[int, int, int, int, int, int]] = []
                for scan in scans:
                    counted = [0]
                    entries = list(scan(view, start, max_data, counted))
                    if len(entries) > len(best) or not best:
                        best, skipped = entries, counted
                for ledger_id, entry_id, lac, offset, length, extra in best:
                    if (ledger_id, entry_id) not in seen:
                        seen.add((ledger_id, entry_id))
                        ledger = found.setdefault(ledger_id, _Ledger())
                        ledger.lac = max(ledger.lac, lac)
                        ledger.entries.append(entry_id)
                        locations.setdefault(ledger_id, []).append(
                            (entry_id, log_id, offset, length)
                        )
                        per_ledger = live.setdefault(log_id, {})
                        per_ledger[ledger_id] = per_ledger.get(ledger_id, 0) + length + extra
                    indexed += 1
            finally:
                view.release()
    return indexed, skipped[0]


_Found = Iterator[tuple[int, int, int, int, int, int]]
"""Intact entries of a log: ``(ledger, entry, lac, offset, length, other bytes)``, the
other bytes those of the record around the entry (its share of a batch header)."""


def _intact(ledger_id: int, entry_id: int, lac: int, data_len: int, max_data: int) -> bool:
    return ledger_id >= 0 and entry_id >= 0 and -1 <= lac < entry_id and data_len <= max_data


def _record_entries(view: memoryview, offset: int, max_data: int, skipped: list[int]) -> _Found:
    """The intact records of a log of format 1 or 2 (one record per entry), from
    ``offset``; the bytes of no intact record are added to ``skipped``."""
    size = len(view)
    while offset + RECORD.size <= size:
        data_len, ledger_id, entry_id, lac, digest = RECORD.unpack_from(view, offset)
        end = offset + RECORD.size + data_len
        if (
            not _intact(ledger_id, entry_id, lac, data_len, max_data)
            or end > size
            or entry_digest(ledger_id, entry_id, lac, view[offset + RECORD.size : end]) != digest
        ):
            offset += 1  # resynchronise on the next record that matches
            skipped[0] += 1
            continue
        yield ledger_id, entry_id, lac, offset, end - offset, 0
        offset = end
    skipped[0] += size - offset


def _batch_entries(view: memoryview, offset: int, max_data: int, skipped: list[int]) -> _Found:
    """The intact entries of a log of batch records (format 3), from ``offset``: those of
    every batch whose header is intact, up to the first entry that is not; past damage,
    the scan resynchronises on the next intact batch header."""
    size = len(view)
    head = ENTRY_HEADER.size
    while offset + BATCH.size <= size:
        body_len, ledger_id, count, crc = BATCH.unpack_from(view, offset)
        body = offset + BATCH.size
        if crc != crc32c.crc32c(view[offset : body - 4]) or ledger_id < 0 or body + body_len > size:
            offset += 1
            skipped[0] += 1
            continue
        position, end, taken = body, body + body_len, 0
        share = BATCH.size  # the header's bytes go to the first entry's ledger share
        while taken < count and position + head <= end:
            entry_id, lac, digest, data_len = ENTRY_HEADER.unpack_from(view, position)
            after = position + head + data_len
            if (
                not _intact(ledger_id, entry_id, lac, data_len, max_data)
                or after > end
                or entry_digest(ledger_id, entry_id, lac, view[position + head : after]) != digest
            ):
                break
            yield ledger_id, entry_id, lac, position, after - position, share
            share = 0
            taken += 1
            position = after
        skipped[0] += end - position
        offset = end
    skipped[0] += size - offset


def _state(ledger_id: int, ledger: _Ledger) -> bytes:
    ids = sorted(ledger.entries)
    sync = SyncCursor()
    start = previous = ids[0]
    for entry_id in ids[1:]:
        if entry_id != previous + 1:
            sync.mark_run(start, previous)
            start = entry_id
        previous = entry_id
    sync.mark_run(start, previous)
    state = LedgerState(ledger_id, master_key=b"", lac=ledger.lac, last_entry_id=ids[-1], sync=sync)
    return state.to_bytes()


def _run_rows(
    ledger_id: int, locations: list[tuple[int, int, int, int]]
) -> list[tuple[bytes, bytes]]:
    """The run rows of a ledger's records ``(entry, log, offset, length)``: consecutive
    entries whose records lie back to back in one log share a row."""
    rows: list[tuple[bytes, bytes]] = []
    first = log = start = end = -1
    lengths: list[int] = []
    for entry_id, log_id, offset, length in sorted(locations):
        following = first + len(lengths)
        if lengths and (
            entry_id != following
            or log_id != log
            or offset != end
            or len(lengths) >= MAX_RUN_ENTRIES
        ):
            rows.append(run_row(ledger_id, first, log, start, lengths))
            lengths = []
        if not lengths:
            first, log, start = entry_id, log_id, offset
        lengths.append(length)
        end = offset + length
    if lengths:
        rows.append(run_row(ledger_id, first, log, start, lengths))
    return rows


def rebuild_index(config: StorageConfig) -> RebuildReport:
    """Move the old index aside and build a new one from the entry logs (see the module
    docstring). The bookie must be stopped.

    Raises:
        StorageIOError: the storage is in use, or a file cannot be read or written.
    """
    data_dir = config.data_dir
    log_dir = data_dir / "entrylogs"
    report = RebuildReport()
    found: dict[int, _Ledger] = {}
    locations: dict[int, list[tuple[int, int, int, int]]] = {}
    live: dict[int, dict[int, int]] = {}
    seen: set[tuple[int, int]] = set()
    lock = lock_directory(data_dir)  # not while a bookie runs on it
    try:
        logs = sorted(
            (int(path.stem), path) for path in log_dir.glob("*.log") if path.stem.isdigit()
        )
        for log_id, path in logs:
            indexed, skipped = _scan_log(
                path, log_id, config.max_entry_bytes, found, locations, live, seen
            )
            report.logs += 1
            report.skipped_bytes += skipped
            if indexed == 0:
                unindexed = path.with_name(path.name + ".unindexed")
                os.replace(path, unindexed)
                report.unindexed_logs.append(unindexed)
        index = data_dir / "index"
        if index.exists():
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            report.kept_index = data_dir / f"index.damaged-{stamp}"
            os.replace(index, report.kept_index)
        LOCAL_FILES.fsync_dir(data_dir)
        LOCAL_FILES.fsync_dir(log_dir)
    except OSError as exc:
        raise StorageIOError(f"rebuilding the index of {data_dir} failed: {exc}") from exc
    finally:
        os.close(lock)
    storage = EntryStorage(
        data_dir,
        entry_log_file_bytes=config.entry_log_file_bytes,
        cache_written=config.cache_entry_logs,
        rebuild=True,
    )
    try:
        rows = {ledger_id: _run_rows(ledger_id, found) for ledger_id, found in locations.items()}
        states = {ledger_id: _state(ledger_id, ledger) for ledger_id, ledger in found.items()}
        storage.restore(rows, live, states, JournalMark(0, 0))
    finally:
        storage.close()
    report.ledgers = len(found)
    report.entries = len(seen)
    return report


def main(argv: Sequence[str]) -> int:
    """``python -m bookie --rebuild-index --data-dir DIR``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="walog bookie --rebuild-index",
        description="Rebuild a stopped bookie's index from its entry logs "
        "(the old index is kept as DATA_DIR/index.damaged-TIME). See docs/bookies.md.",
    )
    parser.add_argument("--rebuild-index", action="store_true", required=True)
    parser.add_argument("--data-dir", type=Path, required=True, help="the bookie's data dir")
    parser.add_argument(
        "--max-entry-bytes", type=int, default=None, metavar="N", help="the bookie's, if set"
    )
    args, _ = parser.parse_known_args(argv)  # the bookie's other flags may be passed along
    config = StorageConfig(data_dir=args.data_dir)
    if args.max_entry_bytes is not None:
        config = dataclasses.replace(config, max_entry_bytes=args.max_entry_bytes)
    try:
        report = rebuild_index(config)
    except StorageIOError as exc:
        print(f"walog bookie: error: {exc}", file=sys.stderr)
        return 1
    print(
        f"index of {args.data_dir} rebuilt: {report.entries} entries of {report.ledgers} "
        f"ledgers from {report.logs} entry logs; {report.skipped_bytes} bytes without an "
        f"intact record skipped; old index kept as {report.kept_index or 'none (there was none)'}"
    )
    for path in report.unindexed_logs:
        print(f"no intact record in {path} (kept, not used)")
    return 0


__all__ = ["RebuildReport", "main", "rebuild_index"]

"""``position_at``: the search of walog.log.time_search driven over bookies and the archive.

The spans searched are the log's non-empty ledgers in order: first those only the archive
holds (ledgers archived and then truncated, walog.log.archived), their time ranges from the
Parquet statistics of the timestamp column and their entries from its rows; then the
listed ledgers, CLOSED ones with the time range the log's record keeps (when it keeps one)
and OPEN ones up to the last add confirmed the bookies give a reader now, read from the
bookies without recovery (nothing is fenced). The same records give the same answer
wherever they are read from.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Sequence

from walog.errors import NoSuchLedgerError
from walog.log.archived import archive_covers, archived_only, archived_stamps, archived_time_range
from walog.log.ledgers import LedgerClientLike, LedgerReaderLike
from walog.log.log_metadata import LogMetadata
from walog.log.position import Position, ledger_end
from walog.log.records import record_timestamps
from walog.log.time_search import Need, Span, micros, search


@dataclasses.dataclass(frozen=True, slots=True)
class TimeAnswer:
    """What :func:`find_position` found.

    Attributes:
        position: the first record at or after the time, None when there is none.
        end: the first position after every record searched (where the next record goes
            as far as the search could see), None for a log without records.
        reads: entries read per ledger (archive rows of an entry count as one read).
    """

    position: Position | None
    end: Position | None
    reads: collections.Counter[int]


class _Entries:
    """Reads one entry's record timestamps from bookies (ledgers opened once, without
    recovery) or from the archive (a ledger's rows read once)."""

    def __init__(self, client: LedgerClientLike, password: bytes, location: str | None) -> None:
        self._client = client
        self._password = password
        self._location = location
        self.archived: set[int] = set()
        self.handles: dict[int, LedgerReaderLike] = {}
        self._rows: dict[int, dict[int, list[int]]] = {}
        self.reads: collections.Counter[int] = collections.Counter()

    async def handle(self, ledger_id: int) -> LedgerReaderLike:
        handle = self.handles.get(ledger_id)
        if handle is None:
            handle = await self._client.open_ledger(
                ledger_id, recovery=False, password=self._password
            )
            self.handles[ledger_id] = handle
        return handle

    async def stamps(self, need: Need) -> Sequence[int]:
        ledger_id, entry_id = need
        self.reads[ledger_id] += 1
        if ledger_id in self.archived:
            assert self._location is not None
            rows = self._rows.get(ledger_id)
            if rows is None:
                rows = await asyncio.to_thread(archived_stamps, self._location, ledger_id)
                self._rows[ledger_id] = rows
            return rows[entry_id]
        handle = await self.handle(ledger_id)
        entry = (await handle.read(entry_id, entry_id))[0]
        return [micros(stamp) for stamp in record_timestamps(entry.data)]

    async def close(self) -> None:
        for handle in self.handles.values():
            await handle.close()


async def _archived_spans(meta: LogMetadata, entries: _Entries) -> list[Span]:
    """The spans of the ledgers only the archive holds (none when records between the
    archive and the bookies are lost: the search covers what a reader from the start
    reads)."""
    location = meta.archive_location
    if meta.truncated_through is None or location is None or not archive_covers(meta):
        return []
    spans = []
    for ledger in await asyncio.to_thread(archived_only, meta):
        # From the files' statistics when they have them; else the search reads the rows
        # of the ledgers it looks into.
        times = await asyncio.to_thread(archived_time_range, location, ledger.ledger_id)
        entries.archived.add(ledger.ledger_id)
        spans.append(Span(ledger.ledger_id, ledger.last_entry_id, times))
    return spans


async def _listed_spans(meta: LogMetadata, entries: _Entries) -> list[Span]:
    spans = []
    for info in meta.ledgers:
        if info.is_closed:
            if info.last_entry_id < 0:
                continue
            times = info.time_range
            spans.append(
                Span(
                    info.ledger_id,
                    info.last_entry_id,
                    None if times is None else (micros(times[0]), micros(times[1])),
                )
            )
            continue
        try:
            handle = await entries.handle(info.ledger_id)
        except NoSuchLedgerError:
            continue  # deleted under us: truncation moved on
        last = handle.last_add_confirmed
        if not handle.is_closed:
            last = max(last, await handle.read_last_add_confirmed())
        if last >= 0:
            spans.append(Span(info.ledger_id, last))
    return spans


async def find_position(
    client: LedgerClientLike, meta: LogMetadata, at: float, password: bytes
) -> TimeAnswer:
    """The first record of the log ``meta`` describes whose timestamp is at or after
    ``at`` (seconds; compared at microsecond resolution), see the module doc.

    Raises:
        walog.errors.NewerFormatError: the archive, when read, is of a newer format version.
        WalogError: a bookie read failed.
    """
    entries = _Entries(client, password, meta.archive_location)
    try:
        spans = [*await _archived_spans(meta, entries), *await _listed_spans(meta, entries)]
        steps = search(micros(at), spans)
        try:
            need = next(steps)
            while True:
                need = steps.send(await entries.stamps(need))
        except StopIteration as stop:
            found: Position | None = stop.value
    finally:
        await entries.close()
    end = ledger_end(spans[-1].ledger_id, spans[-1].last_entry_id) if spans else None
    return TimeAnswer(found, end, entries.reads)


__all__ = ["TimeAnswer", "find_position"]

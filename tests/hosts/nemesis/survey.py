"""Which bookies hold the entries of every fragment of some logs (for the checker's
``under_replicated`` and ``retired_bookie_named`` rules).

Each bookie of a fragment's ensemble is asked, raw, for its share of the fragment's
entries (the entries whose write set holds it), as autorecovery's checks ask; it holds the
fragment when it serves every one. Only closed ledgers, and the fragments before the last
of an open one, are surveyed: the last fragment of an open ledger is its writer's.
"""

from __future__ import annotations

from tests.chaos.checker import FragmentCopies, Replication
from walog.aio import AsyncClient
from walog.errors import NoSuchLedgerError, WalogError
from walog.ledger.readops import write_set_bookies
from walog.metadata.layout import LedgerMetadata
from walog.wire.status import Status

READ_CHUNK = 500


def _runs(entries: list[int]) -> list[tuple[int, int]]:
    """Ascending entry ids as (first, last) runs of consecutive ids."""
    runs: list[tuple[int, int]] = []
    for entry in entries:
        if runs and runs[-1][1] == entry - 1:
            runs[-1] = (runs[-1][0], entry)
        else:
            runs.append((entry, entry))
    return runs


async def _serves(client: AsyncClient, bookie: str, ledger_id: int, entries: list[int]) -> bool:
    """True when ``bookie`` serves every entry of ``entries`` (ascending)."""
    pool = client.ctx.pool.get(bookie)
    try:
        for first, last in _runs(entries):
            while first <= last:
                # A bookie answers consecutive entries from the first asked, maybe fewer.
                reply = await pool.read(ledger_id, first, min(last, first + READ_CHUNK - 1))
                ids = [entry.entry_id for entry in reply.entries]
                if reply.status is not Status.OK or not ids or ids[0] != first:
                    return False
                first = ids[-1] + 1
    except WalogError:
        return False
    return True


def _fragments(metadata: LedgerMetadata) -> list[tuple[int, int, tuple[str, ...]]]:
    """(first, last, ensemble) of every fragment that holds entries and may be surveyed."""
    bounds = [first for first, _ in metadata.ensembles]
    last_entry = metadata.last_entry_id
    spans = []
    for index, (first, ensemble) in enumerate(metadata.ensembles):
        is_last = index == len(bounds) - 1
        if is_last and not metadata.is_closed:
            break
        end = last_entry if is_last else bounds[index + 1] - 1
        if end >= first:
            spans.append((first, end, tuple(ensemble)))
    return spans


async def survey(client: AsyncClient, logs: list[str], retired: frozenset[str]) -> Replication:
    """Every fragment of every ledger of ``logs``, and the bookies live now."""
    live = frozenset(await client.bookies()) | frozenset(await client.read_only_bookies())
    found: list[FragmentCopies] = []
    for name in logs:
        for segment in await (await client.open_log(name)).segments():
            try:
                metadata = await client.ledger_metadata(segment.ledger_id)
            except NoSuchLedgerError:
                continue  # deleted since the listing
            for first, last, ensemble in _fragments(metadata):
                holding = set()
                for bookie in ensemble:
                    share = [
                        e
                        for e in range(first, last + 1)
                        if bookie in write_set_bookies(metadata, e)
                    ]
                    if bookie in live and await _serves(client, bookie, segment.ledger_id, share):
                        holding.add(bookie)
                found.append(
                    FragmentCopies(segment.ledger_id, first, last, ensemble, frozenset(holding))
                )
    return Replication(found, live, retired)

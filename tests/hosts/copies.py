"""On a client host: which entries of a log's closed ledgers lack a copy on a bookie of
their write set, and which fragments still name a given bookie.

``python -m tests.hosts.copies URI LOG LOST_BOOKIE`` prints one JSON object:
``{"ledgers": N, "naming_lost": [[LEDGER, FIRST], ...], "missing": [[LEDGER, ENTRY,
BOOKIE], ...], "racks": [[LEDGER, FIRST, [RACK, ...]], ...]}`` (each entry read from each
bookie of its write set, raw, as autorecovery's checks do).
"""

from __future__ import annotations

import argparse
import asyncio
import json

import walog.aio
from tests.chaos.worker import CHAOS_CLIENT
from walog.ledger.readops import write_set_bookies
from walog.wire.status import Status


async def survey(uri: str, log_name: str, lost: str) -> dict[str, object]:
    """The report described in the module docstring."""
    naming: list[list[int]] = []
    missing: list[list[object]] = []
    racks_of: list[list[object]] = []
    async with await walog.aio.connect(uri, config=CHAOS_CLIENT) as client:
        racks = await client.bookie_racks()
        segments = await (await client.open_log(log_name)).segments()
        for segment in segments:
            metadata = await client.ledger_metadata(segment.ledger_id)
            for first, ensemble in metadata.ensembles:
                racks_of.append([segment.ledger_id, first, [racks.get(b, "?") for b in ensemble]])
                if lost in ensemble:
                    naming.append([segment.ledger_id, first])
            if not metadata.is_closed:
                continue
            for entry_id in range(metadata.last_entry_id + 1):
                for bookie in write_set_bookies(metadata, entry_id):
                    if bookie == lost:
                        continue
                    pool = client.ctx.pool.get(bookie)
                    reply = await pool.read(segment.ledger_id, entry_id, entry_id)
                    if reply.status is not Status.OK:
                        missing.append([segment.ledger_id, entry_id, bookie])
    return {
        "ledgers": len(segments),
        "naming_lost": naming,
        "missing": missing,
        "racks": racks_of,
    }


def main() -> None:
    """Parse the command line and print the survey."""
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.copies")
    parser.add_argument("uri")
    parser.add_argument("log")
    parser.add_argument("lost")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(survey(args.uri, args.log, args.lost))))


if __name__ == "__main__":
    main()

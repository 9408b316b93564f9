"""Write the golden data set of this walog version: ``python -m tests.golden.make_golden``.

The set (``tests/golden/v1/``) is what tests/integration/test_golden_data.py reads back
with every later version: a bookie's data directory and the metadata store it registered
in, after the scripted workload below. It is written once per data format and committed;
the test suite never runs this script. Run it again only to add a set for a new format
version (``--out tests/golden/vN``), never to replace a committed one: a set that a later
version cannot read is the failure the test exists to show.

The workload, on one bookie (``127.0.0.77:31817``: its id is in every ledger's metadata, so
the test starts the bookie at that address) and a SQLite metadata store, every ledger with
ensemble, write and ack quorum 1 and the password ``golden``:

1. ledger "closed": 20 entries, closed;
2. ledger "fenced": 10 entries, then opened with recovery (fenced and closed) while its
   writer still held it: a plain add of the old writer is refused from then on;
3. ledger "deleted": 5 entries, then deleted;
4. the bookie is stopped cleanly (a checkpoint: those entries are in the entry logs and
   the index) and started again;
5. ledger "volatile": VOLATILE, 8 entries, forced, left open;
6. log ``orders``: created with a stored configuration (quorums 1, roll every 4 entries,
   retention of 30 days), 10 records appended by one writer (then closed), subscription
   ``billing`` committed after the 6th record and ``audit`` after the 2nd;
7. the bookie is killed (SIGKILL): what step 5 and 6 wrote is only in its journal, so the
   reader replays it.

Entry ``i`` of a ledger named ``NAME`` holds ``b"NAME entry i"``; record ``i`` of the log
holds ``b"order i"``. Afterwards the journal files' reserved space (zeros the bookie
preallocates and never wrote) is cut off, as replay reads a file's end as the end of its
records either way, and the metadata store is copied into one file (``VACUUM INTO``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import walog
from bookie.storage.journal_files import HEADER_BYTES, journal_files
from walog.testing import BookieProcess

HOST, PORT = "127.0.0.77", 31817
PASSWORD = b"golden"
LOG = "orders"
_BLOCK = 4096


def _payload(name: str, entry_id: int) -> bytes:
    return b"%s entry %d" % (name.encode(), entry_id)


def _ledger(client: walog.Client, name: str, durability: walog.Durability) -> walog.LedgerWriter:
    return client.create_ledger(
        1, 1, 1, durability=durability, password=PASSWORD, custom_metadata={"golden": name}
    )


def _first_phase(client: walog.Client) -> dict[str, int]:
    ids: dict[str, int] = {}
    closed = _ledger(client, "closed", walog.Durability.PERSISTENT)
    closed.append_many(_payload("closed", i) for i in range(20))
    closed.close()
    ids["closed"] = closed.ledger_id

    fenced = _ledger(client, "fenced", walog.Durability.PERSISTENT)
    fenced.append_many(_payload("fenced", i) for i in range(10))
    client.open_ledger(fenced.ledger_id, password=PASSWORD).close()
    with contextlib.suppress(walog.LedgerFencedError):
        fenced.append(b"refused")
        raise SystemExit("the fenced ledger took an add")
    ids["fenced"] = fenced.ledger_id

    deleted = _ledger(client, "deleted", walog.Durability.PERSISTENT)
    deleted.append_many(_payload("deleted", i) for i in range(5))
    deleted.close()
    client.delete_ledger(deleted.ledger_id)
    ids["deleted"] = deleted.ledger_id
    return ids


def _second_phase(client: walog.Client) -> dict[str, object]:
    volatile = _ledger(client, "volatile", walog.Durability.VOLATILE)
    volatile.append_many(_payload("volatile", i) for i in range(8))
    volatile.force()
    config = walog.LogConfig(
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        roll=walog.RollPolicy(max_entries=4),
        retention=walog.RetentionPolicy(max_age=30 * 86400.0),
    )
    log = client.create_log(LOG, config, password=PASSWORD)
    writer = log.open_writer()
    positions = [writer.append(b"order %d" % i) for i in range(10)]
    writer.close()
    for name, after in (("billing", 6), ("audit", 2)):
        reader = log.open_reader(subscription=name)
        for _ in range(after):
            assert reader.read_next(timeout=10) is not None
        reader.commit()
        reader.close()
    return {
        "volatile": volatile.ledger_id,
        "positions": [str(p) for p in positions],
        "segments": [(s.ledger_id, s.last_entry_id) for s in log.segments()],
        "cursors": {s.name: str(s.position) for s in log.subscriptions()},
    }


def _trim_journal(journal: Path) -> None:
    """Cut each journal file's trailing zeros (space reserved, never written), keeping
    whole blocks and the header."""
    for _, path in journal_files(journal):
        raw = path.read_bytes()
        end = max(len(raw.rstrip(b"\0")), HEADER_BYTES)
        end = min(len(raw), -(-end // _BLOCK) * _BLOCK)
        with path.open("r+b") as handle:
            handle.truncate(end)


def make(out: Path) -> dict[str, object]:
    """Run the workload and write the set to ``out`` (which must not exist)."""
    if out.exists():
        raise SystemExit(f"{out} exists: a committed golden set is never replaced")
    with tempfile.TemporaryDirectory(prefix="walog-golden-") as scratch:
        work = Path(scratch)
        uri = f"sqlite:///{work}/metadata.sqlite"
        bookie = BookieProcess(work / "bookie", uri, host=HOST, port=PORT)
        try:
            bookie.start().wait_ready()
            with walog.connect(uri) as client:
                ids: dict[str, object] = dict(_first_phase(client))
            bookie.terminate()
            bookie.start().wait_ready()
            with walog.connect(uri) as client:
                ids.update(_second_phase(client))
            bookie.kill()
        finally:
            bookie.stop_quietly()
        _trim_journal(work / "bookie" / "journal")
        out.mkdir(parents=True)
        # The native protocol's Unix socket is the process's, not data.
        shutil.copytree(work / "bookie", out / "bookie", ignore=shutil.ignore_patterns("*.sock"))
        with contextlib.closing(sqlite3.connect(work / "metadata.sqlite")) as db:
            db.execute("VACUUM INTO ?", (str(out / "metadata.sqlite"),))
    return ids


def main(argv: list[str] | None = None) -> int:
    """Write the set and print what it holds (the test module records it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "v1")
    args = parser.parse_args(argv)
    print(json.dumps(make(args.out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

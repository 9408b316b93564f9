"""Data written by walog 0.1.0 (tests/golden/v1) and by the first release with index
format 3 (tests/golden/v2) is read back by this version: every entry, every fence, every
closed ledger's end, the log's records, its configuration and its cursors
(docs/compatibility.md).

The set was written by tests/golden/make_golden.py (its docstring has the workload); what
it holds is written out here, so that when a later version fails, the failure names what
changed. Formats in the set: journal files version 2, entry logs version 2, index version 2
(``walog-bookie-index/2``), cookie 1, bookie registration 1, ledger metadata 1, log record
1, log entries 1, SQLite metadata store schema of 0.1.0 (tables ``nodes``, ``sessions``,
``counters``). The v2 set: the same, but index version 3 (one row per run of entries) and
the SQLite store's ``user_version`` 1.

The test copies the set to a temporary directory, points the copied cookies at the copied
directories (a cookie names the absolute paths its bookie was started with; only those two
fields change), starts a real bookie process on it at the address the ledgers name, and
reads everything back with the walog client.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import socket
import sqlite3
from pathlib import Path

import pytest

import walog
from tests.integration.bookies import make_add
from tests.integration.disks import add_status
from walog import Durability, LogConfig, Position, RetentionPolicy, RollPolicy
from walog.testing import BookieProcess
from walog.wire.proto import bookie_pb2 as pb

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
HOST, PORT = "127.0.0.77", 31817  # the bookie id every ledger's ensemble names
BOOKIE_ID = f"{HOST}:{PORT}"
PASSWORD = b"golden"

# ledger id -> (name in custom metadata, durability, state, last entry id, entries held)
LEDGERS = {
    1: ("closed", Durability.PERSISTENT, "CLOSED", 19, 20),
    2: ("fenced", Durability.PERSISTENT, "CLOSED", 9, 10),
    4: ("volatile", Durability.VOLATILE, "OPEN", -1, 8),  # forced, never closed
}
DELETED = 3
FENCED = 2

LOG = "orders"
LOG_CONFIG = LogConfig(
    ensemble_size=1,
    write_quorum=1,
    ack_quorum=1,
    roll=RollPolicy(max_entries=4),
    retention=RetentionPolicy(max_age=30 * 86400.0),
)
CURSORS = {"audit": Position(5, 2, 0), "billing": Position(5, 6, 0)}


@dataclasses.dataclass(frozen=True)
class GoldenSet:
    """One committed set and what differs between sets: the bookie's instance id and where
    the log rolled (timing decides it)."""

    name: str
    instance_id: str
    segments: list[tuple[int, int]]  # (ledger id, last entry id), both CLOSED

    @property
    def records(self) -> list[tuple[Position, bytes]]:
        """One record per entry: record i holds b"order i"."""
        positions = [
            Position(ledger_id, entry, 0)
            for ledger_id, last in self.segments
            for entry in range(last + 1)
        ]
        return [(position, b"order %d" % i) for i, position in enumerate(positions)]


SETS = [
    GoldenSet("v1", "79f439d4-5ddc-4858-bcb4-921247a20840", [(5, 8), (6, 0)]),
    GoldenSet("v2", "74b06d60-2658-4bdc-986e-192dda67c174", [(5, 7), (6, 1)]),
]


def _payload(name: str, entry_id: int) -> bytes:
    return b"%s entry %d" % (name.encode(), entry_id)


def _address_free() -> None:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, PORT))
        except OSError as exc:
            pytest.fail(f"the golden bookie's address {BOOKIE_ID} is taken: {exc}")


def _copy(tmp_path: Path, golden: GoldenSet) -> tuple[Path, str]:
    """The copied set: the data directory and the metadata store's URI, the cookies
    pointing at the copy."""
    data_dir = tmp_path / "bookie"
    shutil.copytree(GOLDEN / golden.name / "bookie", data_dir)
    database = tmp_path / "metadata.sqlite"
    shutil.copyfile(GOLDEN / golden.name / "metadata.sqlite", database)
    cookie = json.loads((data_dir / "cookie.json").read_text())
    assert cookie["instance_id"] == golden.instance_id and cookie["bookie_id"] == BOOKIE_ID
    cookie.update(data_dir=str(data_dir), journal_dir=str(data_dir / "journal"))
    raw = json.dumps(cookie, sort_keys=True)
    (data_dir / "cookie.json").write_text(raw)
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        changed = db.execute(
            "UPDATE nodes SET data = ? WHERE path = ?",
            (raw.encode(), f"/bookies/cookies/{BOOKIE_ID}"),
        ).rowcount
    assert changed == 1, "the golden metadata store holds the bookie's cookie"
    return data_dir, f"sqlite:///{database}"


def _check_ledgers(client: walog.Client) -> None:
    for ledger_id, (name, durability, state, last, _) in LEDGERS.items():
        metadata = client.ledger_metadata(ledger_id)
        assert (metadata.custom_metadata, metadata.durability) == ({"golden": name}, durability)
        assert (metadata.state, metadata.last_entry_id) == (state, last), name
        assert metadata.ensembles == ((0, (BOOKIE_ID,)),), name
    with pytest.raises(walog.NoSuchLedgerError):
        client.ledger_metadata(DELETED)
    for ledger_id, (name, _, _, _, held) in LEDGERS.items():
        reader = client.open_ledger(ledger_id, password=PASSWORD)  # recovers the open one
        try:
            assert reader.is_closed and reader.last_add_confirmed == held - 1, name
            entries = reader.read(0, held - 1)
            assert [e.data for e in entries] == [_payload(name, i) for i in range(held)], name
        finally:
            reader.close()


def _check_log(client: walog.Client, golden: GoldenSet) -> None:
    log = client.open_log(LOG, password=PASSWORD)
    assert log.stored_config() == LOG_CONFIG
    segments = log.segments()
    assert [(s.ledger_id, s.last_entry_id) for s in segments] == golden.segments
    assert {s.name: s.position for s in log.subscriptions()} == CURSORS
    reader = log.open_reader("earliest")
    try:
        got = [reader.read_next(timeout=10) for _ in golden.records]
    finally:
        reader.close()
    assert [(r.position, r.data) for r in got if r is not None] == golden.records
    for name, cursor in CURSORS.items():
        reader = log.open_reader(subscription=name)
        try:
            record = reader.read_next(timeout=10)
        finally:
            reader.close()
        assert record is not None and record.position == cursor, name


@pytest.mark.parametrize("golden", SETS, ids=[s.name for s in SETS])
def test_data_written_by_earlier_releases_is_read_back_whole(
    tmp_path: Path, golden: GoldenSet
) -> None:
    _address_free()
    data_dir, uri = _copy(tmp_path, golden)
    bookie = BookieProcess(data_dir, uri, host=HOST, port=PORT)
    try:
        bookie.start().wait_ready()
        # The fence outlived the restart: the old writer's plain add is refused.
        assert add_status(bookie, make_add(FENCED, 10, b"late", lac=9, password=PASSWORD)) == (
            pb.FENCED
        )
        with walog.connect(uri) as client:
            _check_ledgers(client)
            _check_log(client, golden)
        assert (
            json.loads((data_dir / "cookie.json").read_text())["instance_id"] == golden.instance_id
        )
    finally:
        bookie.stop_quietly()

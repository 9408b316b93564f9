"""A flipped bit in a bookie's entry log: the digest catches it, the damaged copy is never
served (readers get the entry from another bookie), the bookie reports it, and an
autorecovery daemon copies the entry back so the bookie serves it again, also after a
restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.bookies import REPO_ROOT
from tests.integration.disks import wait_until
from tests.processes import DIE_WITH_PARENT
from walog.testing import BookieProcess, LocalCluster
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

DAMAGED = 7


def _data(entry: int) -> bytes:
    return b"entry %03d;" % entry * 100


def _read_one(bookie: BookieProcess, ledger_id: int, entry: int) -> tuple[int, bytes]:
    with bookie.channel() as channel:
        reply = pb_grpc.BookieStub(channel).Read(
            pb.ReadRequest(ledger_id=ledger_id, first_entry_id=entry, last_entry_id=entry),
            timeout=10,
        )
    return reply.status, reply.entries[0].data if reply.entries else b""


def test_a_damaged_copy_is_never_served_and_is_replaced_by_re_replication(
    tmp_path: Path,
) -> None:
    with LocalCluster(bookies=3, data_dir=tmp_path / "cluster") as cluster:
        client = cluster.connect()
        with client:
            with client.create_ledger(3, 3, 2) as writer:
                for entry in range(20):
                    writer.append(_data(entry))
            ledger_id = writer.ledger_id
            victim_id = cluster.bookie_ids[1]
            victim = cluster.bookie(victim_id)
            cluster.stop(victim_id)  # the final checkpoint puts the entries in entry logs
            flipped = 0
            for log in (victim.data_dir / "entrylogs").glob("*.log"):
                raw = bytearray(log.read_bytes())
                at = raw.find(_data(DAMAGED))
                if at >= 0:
                    raw[at + 500] ^= 0x10
                    log.write_bytes(bytes(raw))
                    flipped += 1
            assert flipped == 1
            cluster.restart(victim_id)

            status, _ = _read_one(victim, ledger_id, DAMAGED)
            assert status == pb.IO_ERROR, "a damaged copy must never be served"
            with client.open_ledger(ledger_id) as reader:
                assert [e.data for e in reader.read(0, 19)] == [_data(i) for i in range(20)]

            daemon = subprocess.Popen(
                [*DIE_WITH_PARENT, sys.executable, "-m", "walog", "autorecovery",
                 "--interval", "0.3", "--metadata", cluster.metadata_uri],
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                wait_until(
                    lambda: _read_one(victim, ledger_id, DAMAGED) == (pb.OK, _data(DAMAGED)),
                    "the damaged copy is replaced by re-replication",
                )
            finally:
                daemon.terminate()
                daemon.wait(timeout=30)
            assert "damaged copy reported for re-replication" in victim.log()
            cluster.stop(victim_id)
            cluster.restart(victim_id)
            assert _read_one(victim, ledger_id, DAMAGED) == (pb.OK, _data(DAMAGED))
            for entry in range(20):
                assert _read_one(victim, ledger_id, entry) == (pb.OK, _data(entry))

"""A flipped bit in a bookie's entry log: the digest catches it, the damaged copy is never
served (readers get the entry from another bookie), the bookie reports it, and an
autorecovery daemon copies the entry back so the bookie serves it again, also after a
restart. An entry log the bookie's disk cannot read (EIO): auto-recovery's share check
counts the copies as missing and copies them back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import walog.aio as aio
from tests.integration.bookies import REPO_ROOT
from tests.integration.disks import eio_switch, wait_until
from tests.integration.waiting import eventually
from tests.processes import DIE_WITH_PARENT
from walog.autorecovery import recover
from walog.config import ClientConfig, Timeouts
from walog.errors import BookieError
from walog.testing import BookieProcess, LocalCluster
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc
from walog.wire.status import Status

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


UNREADABLE_ENTRIES = 3


async def _answers(client: aio.AsyncClient, bookie: str, ledger_id: int, status: Status) -> None:
    """Assert that ``bookie`` answers ``status`` to a read of each entry of the ledger
    through the client's own connection (retried while it reconnects after a restart)."""

    async def check() -> None:
        got = []
        for entry in range(UNREADABLE_ENTRIES):
            try:
                got.append((await client.ctx.pool.get(bookie).read(ledger_id, entry, entry)).status)
            except BookieError as exc:
                raise AssertionError(f"{bookie} did not answer: {exc}") from exc
        assert got == [status] * UNREADABLE_ENTRIES

    await eventually(check, within=30.0)


async def test_verify_counts_an_unreadable_copy_as_missing_and_copies_it_back(
    fresh_cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ClientConfig(timeouts=Timeouts(add=5.0, read=5.0))
    async with await aio.connect(fresh_cluster.metadata_uri, config=config) as client:
        writer = await client.create_ledger(3, 3, 2)
        for entry in range(UNREADABLE_ENTRIES):
            await writer.append(_data(entry))
        await writer.close()
        ledger_id = writer.ledger_id
        victim_id = fresh_cluster.bookie_ids[1]
        victim = fresh_cluster.bookie(victim_id)
        fresh_cluster.stop(victim_id)  # the final checkpoint puts the entries in an entry log
        logs = [log for log in (victim.data_dir / "entrylogs").glob("*.log")
                if _data(0) in log.read_bytes()]  # fmt: skip
        assert len(logs) == 1, logs
        # Every read of that log fails from now on, across restarts; other files are fine.
        switch = eio_switch(tmp_path, logs[0], calls="pread")
        switch.on()
        for name, value in switch.env.items():
            monkeypatch.setenv(name, value)
        fresh_cluster.restart(victim_id)
        monkeypatch.delenv("LD_PRELOAD")
        await _answers(client, victim_id, ledger_id, Status.IO_ERROR)

        # A check reads up to the first copy missing; the bookie takes a new copy of each
        # entry it could not serve, so a pass mends at least one.
        passes = []
        for _ in range(UNREADABLE_ENTRIES + 1):
            report = await recover(client.ctx, verify=True, verify_percent=100)
            assert not report.unrepairable and not report.repaired
            passes.append([d.ensemble[d.lost[0]] for d in report.refilled])
            if not report.refilled:
                break
        assert passes[0] == [victim_id], "an unreadable copy was counted as held"
        assert passes[-1] == []
        await _answers(client, victim_id, ledger_id, Status.OK)

        monkeypatch.setenv("LD_PRELOAD", switch.env["LD_PRELOAD"])
        fresh_cluster.restart(victim_id)  # the old log is still unreadable
        monkeypatch.delenv("LD_PRELOAD")
        for entry in range(UNREADABLE_ENTRIES):
            assert _read_one(victim, ledger_id, entry) == (pb.OK, _data(entry))

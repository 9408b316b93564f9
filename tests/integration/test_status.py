"""``walog status``: exit 0 and "healthy" for a healthy cluster; exit 1 naming a killed
bookie, a read-only bookie and the ledgers the killed one leaves under-replicated."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc.aio
import pytest

import walog.aio
from tests.integration.bookies import BookieProcess, make_add, send_frames
from tests.integration.disks import fill, small_tmpfs
from walog.metadata.election import ELECTION_RECORD_FORMAT, elect, leader_path
from walog.metadata.zookeeper_probe import known_loss, server_version
from walog.testing import LocalCluster, ZooKeeperServer, free_port
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc


def status(uri: str, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "walog", "status", "--metadata", uri, *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


async def test_status_of_a_healthy_cluster_exits_0_listing_bookies_logs_and_leaders(
    cluster: LocalCluster, log_name: str
) -> None:
    async with await walog.aio.connect(cluster.metadata_uri) as client:
        log = await client.open_log(log_name)
        async with await log.open_writer() as writer:
            await writer.append(b"one")
            leadership = await elect(client.ctx.store, f"kv-{log_name}", "node-7")
            try:
                done = await asyncio.to_thread(status, cluster.metadata_uri)
                doc = json.loads(
                    (await asyncio.to_thread(status, cluster.metadata_uri, "--json")).stdout
                )
            finally:
                await leadership.resign()
            ledger_id = writer.ledger_id
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("healthy: nothing needs attention")
    rows = [line.split() for line in done.stdout.splitlines()]
    for bookie in cluster.bookie_ids:
        assert [bookie, "writable"] in [row[:2] for row in rows]
    # The log: one segment, its writer (this process) appending to it in its first epoch.
    assert [log_name, "1", str(ledger_id), "1", "pid", str(os.getpid()), "on"] in [
        row[:7] for row in rows
    ]
    assert [f"kv-{log_name}", "node-7", str(leadership.epoch)] in rows
    assert doc["healthy"] is True and doc["problems"] == []
    assert {b["bookie_id"] for b in doc["bookies"]} >= set(cluster.bookie_ids)
    logs = {entry["name"]: entry for entry in doc["logs"]}
    writer_doc = logs[log_name].pop("writer")
    assert logs[log_name] == {
        "name": log_name,
        "segments": 1,
        "open_segment": ledger_id,
        "epoch": 1,
        "damaged": [],
    }
    assert writer_doc["pid"] == os.getpid() and writer_doc["epoch"] == 1


@pytest.mark.zk
async def test_status_warns_of_a_zookeeper_release_known_to_lose_acknowledged_writes(
    zookeeper: ZooKeeperServer, zk_uri: str
) -> None:
    async with await walog.aio.connect(zk_uri):
        pass  # its chroot exists now
    version = server_version(zookeeper.connect_string)
    assert version is not None, "the test ZooKeeper did not say its version (srvr)"
    done = await asyncio.to_thread(status, zk_uri)
    doc = json.loads((await asyncio.to_thread(status, zk_uri, "--json")).stdout)
    # A warning, not a problem: nothing is broken yet.
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("healthy: nothing needs attention")
    why = known_loss(version)
    if why is None:  # a ZooKeeper release without the bug: nothing to warn of
        assert "WARNINGS" not in done.stdout and doc["warnings"] == []
        return
    assert doc["warnings"] == [f"{zookeeper.connect_string}: {why}"]
    assert f"WARNINGS (1):\n  - {zookeeper.connect_string}: {why}" in done.stdout


async def _make_read_only(bookie: BookieProcess, journal_dir: Path) -> None:
    """Fill the bookie's journal disk, then add more than its reserved journal space."""
    await asyncio.to_thread(fill, journal_dir)
    frames = [pb.AddFrame(batches=[make_add(900, e, b"y" * (1024 * 1024))]) for e in range(6)]
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        results, _ = await send_frames(pb_grpc.BookieStub(channel), frames)
    assert pb.IO_ERROR in {r.status for r in results}


async def test_status_names_a_killed_and_a_read_only_bookie_and_exits_1(
    fresh_cluster: LocalCluster, tmp_path: Path
) -> None:
    with fresh_cluster.connect() as client:
        ledger_ids = []
        for _ in range(2):
            with client.create_ledger(3, 3, 2) as writer:
                writer.append(b"kept")
            ledger_ids.append(writer.ledger_id)
    killed = fresh_cluster.bookie_ids[0]
    with small_tmpfs(16) as journal_dir:
        extra = BookieProcess(
            tmp_path / "read-only-bookie",
            fresh_cluster.metadata_uri,
            extra_args=["--journal-dir", str(journal_dir), "--journal-file-bytes", "8MiB"],
        )
        try:
            # Started before the kill, so it cannot be given the killed bookie's port (id).
            extra.start().wait_ready()
            fresh_cluster.kill(killed)
            await _make_read_only(extra, journal_dir)
            done = await asyncio.to_thread(status, fresh_cluster.metadata_uri)
            doc = json.loads(
                (await asyncio.to_thread(status, fresh_cluster.metadata_uri, "--json")).stdout
            )
        finally:
            extra.stop_quietly()
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {
        line.split()[0]: line.split()[1]
        for line in done.stdout.splitlines()
        if ":" in line.split(" ")[0]
    }
    assert rows[killed] == "down"
    assert rows[extra.bookie_id] == "read-only"
    for bookie in fresh_cluster.bookie_ids[1:]:
        assert rows[bookie] == "writable"
    assert "2 under-replicated" in done.stdout
    attention = done.stdout.split("NEEDS ATTENTION (3):", 1)[1]
    assert f"bookie {killed} is down" in attention
    assert f"bookie {extra.bookie_id} is read-only" in attention
    assert "2 ledger(s) under-replicated" in attention
    states = {b["bookie_id"]: b["state"] for b in doc["bookies"]}
    assert states[killed] == "down" and states[extra.bookie_id] == "read-only"
    assert doc["under_replicated_ledgers"] == sorted(ledger_ids)
    assert doc["healthy"] is False and len(doc["problems"]) == 3


# A ZooKeeper URI nothing answers at: no server is started (the id says so).
@pytest.mark.parametrize("kind", ["sqlite", "zk-nothing-listening"])
def test_status_of_an_unreachable_metadata_store_exits_1_naming_it(
    tmp_path: Path, kind: str
) -> None:
    if kind == "sqlite":
        uri = f"sqlite:///{tmp_path}/no-such-dir/meta.db"
    else:
        uri = f"zk://127.0.0.1:{free_port()}/walog"  # nothing listens there
    done = status(uri, "--timeout", "1")
    assert done.returncode == 1
    assert done.stdout.startswith(f"NEEDS ATTENTION (1):\n  - metadata store {uri} unreachable")
    doc = json.loads(status(uri, "--timeout", "1", "--json").stdout)
    assert doc["healthy"] is False and doc["metadata"]["reachable"] is False


async def test_status_names_a_leader_record_of_a_newer_version_and_exits_1(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    newer = ELECTION_RECORD_FORMAT + 1
    async with await walog.aio.connect(uri) as client:
        store = client.ctx.store
        await store.create(leader_path("kv-orders"), b"")
        doc = {"format": newer, "candidate": "node-7", "token": "t", "epoch": 4}
        await store.set(leader_path("kv-orders"), json.dumps(doc).encode(), 0)
    done = await asyncio.to_thread(status, uri)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"  - election 'kv-orders''s leader record has format version {newer}; "
        f"this walog reads up to {ELECTION_RECORD_FORMAT}: upgrade walog\n"
    ) in done.stdout

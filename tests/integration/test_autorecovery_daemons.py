"""Several ``walog autorecovery`` daemons: one auditor at a time, elected through the
metadata store; repairs split by ledger locks, each fragment repaired once; a killed
auditor is replaced once its session expires, and the others go on repairing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bookies import REPO_ROOT
from tests.integration.waiting import eventually
from tests.processes import DIE_WITH_PARENT
from walog import aio
from walog.autorecovery.daemon import AUDITOR_ELECTION
from walog.metadata.election import current_leader
from walog.testing import LocalCluster

LEDGERS = 30


@pytest.fixture
def five_bookies(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(bookies=5, data_dir=tmp_path / "cluster") as started:
        yield started


def _start_daemon(cluster: LocalCluster, out: Path) -> subprocess.Popen[bytes]:
    command = [*DIE_WITH_PARENT, sys.executable, "-m", "walog", "autorecovery", "--json"]
    command += ["--interval", "0.3", "--lost-after", "0.5", "--metadata", cluster.metadata_uri]
    with out.open("wb") as sink:
        return subprocess.Popen(command, stdout=sink, cwd=REPO_ROOT)


def _repaired(out: Path) -> int:
    reports = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return sum(len(report["repaired"]) for report in reports)


async def _fragments_naming(client: aio.AsyncClient, bookie: str) -> int:
    count = 0
    for ledger_id in await client.list_ledgers():
        metadata = await client.ledger_metadata(ledger_id)
        count += sum(bookie in ensemble for _, ensemble in metadata.ensembles)
    return count


async def test_one_elected_auditor_and_ledger_locks_split_the_repairs(
    five_bookies: LocalCluster, tmp_path: Path
) -> None:
    cluster = five_bookies
    async with await aio.connect(cluster.metadata_uri) as client:
        for _ in range(LEDGERS):
            writer = await client.create_ledger(3, 3, 2)
            for entry in range(3):
                await writer.append(b"entry %d" % entry)
            await writer.close()
        outs = [tmp_path / f"daemon-{n}.out" for n in range(3)]
        daemons = [_start_daemon(cluster, out) for out in outs]
        try:
            store = client.ctx.store

            async def elected() -> None:
                assert await current_leader(store, AUDITOR_ELECTION) is not None

            await eventually(elected, within=30)
            leader = await current_leader(store, AUDITOR_ELECTION)
            assert leader is not None
            first_auditor, first_epoch = leader
            by_pid = {str(d.pid): d for d in daemons}
            auditor = by_pid[first_auditor.split(":")[1]]

            lost = cluster.bookie_ids[0]
            to_repair = await _fragments_naming(client, lost)
            assert to_repair > 0
            cluster.kill(lost)

            async def repaired_all() -> None:
                assert await _fragments_naming(client, lost) == 0

            await eventually(repaired_all, within=60)
            await eventually(
                _assert(lambda: sum(_repaired(out) for out in outs) == to_repair), within=10
            )

            # The auditor dies: another daemon is elected once its session expires.
            auditor.send_signal(signal.SIGKILL)
            auditor.wait(timeout=10)

            async def replaced() -> None:
                leader = await current_leader(store, AUDITOR_ELECTION)
                assert leader is not None and leader[0] != first_auditor
                assert leader[1] > first_epoch

            await eventually(replaced, within=30)

            second = cluster.bookie_ids[1]
            to_repair_2 = await _fragments_naming(client, second)
            cluster.kill(second)

            async def repaired_second() -> None:
                assert await _fragments_naming(client, second) == 0

            await eventually(repaired_second, within=60)
            survivors = [d for d in daemons if d is not auditor]
            for daemon in survivors:
                daemon.send_signal(signal.SIGTERM)
            assert [d.wait(timeout=30) for d in survivors] == [0, 0]
            assert sum(_repaired(out) for out in outs) == to_repair + to_repair_2
        finally:
            for daemon in daemons:
                if daemon.poll() is None:
                    daemon.kill()
                    daemon.wait()


def _assert(check):  # type: ignore[no-untyped-def]
    async def run() -> None:
        assert check()

    return run

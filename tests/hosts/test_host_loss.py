"""A bookie host is lost for good: the autorecovery daemon, on a host of its own, puts every
ledger back on Qw bookies of distinct racks within RECOVERY_BOUND_S, and a reader on
another host reads the whole log without a failure meanwhile."""

from __future__ import annotations

import collections
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.conftest import start_host_cluster
from tests.hosts.history import HostWriter, check_readable, fragments, read_back
from walog.testing.hosts import HostCluster

pytestmark = pytest.mark.timeout(240)

LOG = "host-loss"
RECOVERY_BOUND_S = 60.0
"""From the host's loss to every ledger on three surviving bookies of three racks: the
daemon declares a bookie lost after --lost-after 3 s of absence (past the 4 s session
expiry), passes every 1 s, and copies a few hundred small entries per ledger."""


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    """Its own cluster: a host is lost for good here. c3 runs autorecovery."""
    cluster = start_host_cluster(tmp_path_factory.mktemp("hosts"), clients=3)
    try:
        yield cluster
    finally:
        cluster.close()


def _survey(cluster: HostCluster, lost: str) -> dict[str, list[list[object]]]:
    proc = cluster.popen(
        "c2",
        ["python", "-m", "tests.hosts.copies", cluster.metadata_uri, LOG, lost],
        log=subprocess.PIPE,
    )
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out.decode()[-2000:]
    survey: dict[str, list[list[object]]] = json.loads(out.decode().splitlines()[-1])
    return survey


def test_autorecovery_on_its_own_host_restores_every_ledger_after_a_host_is_lost(
    lossy: HostCluster, tmp_path: Path
) -> None:
    cluster = lossy
    writer = HostWriter(cluster, "c1", LOG, tmp_path / "writer", rate=600, roll_entries=15)
    writer.wait_for_more(2000, timeout=60)
    assert writer.stop() == 0, writer.tail()
    acks = writer.acks()
    end = max(a.position for a in acks)
    # The bookie in the most ensembles goes, host and all.
    named = collections.Counter(b for _, _, ensemble in fragments(cluster, LOG) for b in ensemble)
    lost = max(cluster.bookie_ids, key=lambda b: named[b])
    # Checked before the loss: under load the daemon may repair everything before the
    # first survey below has run.
    assert named[lost], f"{lost} was in no fragment: nothing would be put to the test"
    with (tmp_path / "autorecovery.log").open("ab") as out:
        daemon = cluster.popen(
            "c3",
            ["python", "-m", "walog", "autorecovery", "--metadata", cluster.metadata_uri,
             "--interval", "1", "--lost-after", "3", "--json"],
            log=out,
        )  # fmt: skip
    try:
        cluster.kill(lost)
        cluster.isolate(cluster.host_of(lost))
        lost_at = time.monotonic()
        reads = 0
        while True:
            # Reads never fail meanwhile: a fresh reader on another host, again and again.
            records = read_back(cluster, "c2", LOG, end, tmp_path / f"read-{reads}")
            assert not check_readable(acks, records, end)
            reads += 1
            survey = _survey(cluster, lost)
            if not survey["naming_lost"] and not survey["missing"]:
                break
            assert time.monotonic() - lost_at < RECOVERY_BOUND_S, (
                f"after {RECOVERY_BOUND_S:g}s: {len(survey['naming_lost'])} fragments still "
                f"name {lost}, {len(survey['missing'])} copies missing"
            )
        for ledger, first, racks in survey["racks"]:
            assert len(set(racks)) == 3, (ledger, first, racks)  # type: ignore[arg-type]
        assert daemon.poll() is None, (tmp_path / "autorecovery.log").read_text()[-2000:]
    finally:
        daemon.terminate()
        daemon.wait(30)
        cluster.heal()
    print(f"{named[lost]} fragments repaired; {reads} full reads meanwhile")

"""A cluster across hosts (``walog.testing.HostCluster``), shared by the tests of a module.

Starting it takes a few seconds (3 ZooKeeper nodes, 6 bookies, each on a host of its own),
so it is module-scoped: a test that faults it must heal it (``heal()``, restart what it
stopped) before it ends; :func:`healthy` checks that. Where network namespaces cannot be
made (not root, no ``ip``/``nft``), every test here fails with the one line that says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from walog.errors import WalogError
from walog.testing.hosts import HostCluster


def start_host_cluster(data_dir: Path, **options: int) -> HostCluster:
    """A started HostCluster, or the test fails with one line saying why it cannot be."""
    cluster = HostCluster(data_dir=data_dir, **options)
    try:
        return cluster.start()
    except WalogError as exc:
        pytest.fail(f"cannot build hosts here: {str(exc).splitlines()[0]}", pytrace=False)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    """6 bookies on 6 hosts over 3 racks, a 3-node ZooKeeper ensemble, 2 client hosts."""
    cluster = start_host_cluster(tmp_path_factory.mktemp("hosts"))
    try:
        yield cluster
    finally:
        cluster.close()


def healthy(cluster: HostCluster) -> None:
    """Undo the network faults and wait until every bookie is registered again and the
    ensemble has a leader (what a test leaves for the next one)."""
    cluster.heal()
    cluster.start_zk()
    for bookie_id in cluster.bookie_ids:
        if not cluster.bookie(bookie_id).running:
            cluster.restart(bookie_id)
        else:
            cluster.wait_ready(bookie_id)

"""A local walog cluster of real bookie processes, for your own tests and for demos.

:class:`LocalCluster` starts ``python -m bookie`` processes on free loopback ports, all
registered in one metadata store: an SQLite file it creates (the default) or a running
ZooKeeper you name with a ``zk://`` URI. It gives you the metadata URI to connect with and
lets a test crash, stop, freeze and restart bookies::

    from walog.testing import LocalCluster
    import walog

    with LocalCluster(bookies=3) as cluster:
        with walog.connect(cluster.metadata_uri) as client:
            with client.create_ledger() as ledger:
                ledger.append(b"hello")
            cluster.kill(0)        # SIGKILL: acknowledged entries survive a restart
            cluster.restart(0)

Bookies are addressed by index (0, 1, ... in start order) or by bookie id (``HOST:PORT``).
Each bookie keeps its port and data directory for the cluster's life, so a restarted bookie
comes back with the same id and its data. Every bookie's output goes to
``<data_dir>/logs/bookie-<n>.log``; a bookie that fails to start raises
:class:`LocalClusterError` with the tail of that log.

:class:`BookieProcess` is one such bookie on its own, for tests of the bookie itself.

The bookies speak plaintext gRPC without authentication: the cluster is for tests on one
host, not for production.

:class:`HostCluster` is the same idea across hosts: each bookie, each node of a three-node
ZooKeeper ensemble and each client in a network namespace of its own (needs root), with
racks and faults between hosts (:mod:`walog.testing.hosts`).

:class:`StandaloneSpark` starts a Spark standalone master and workers from the installed
pyspark, for Spark jobs on a real cluster (:mod:`walog.testing.spark`).

:class:`ZooKeeperServer` is a single-node ZooKeeper on this host (Debian's jars and Java), for
a cluster on ZooKeeper instead of SQLite::

    from walog.testing import LocalCluster, ZooKeeperServer

    with ZooKeeperServer() as zk, LocalCluster(metadata=zk.uri("/my-test")) as cluster:
        ...

Modules: ``cluster`` (LocalCluster), ``process`` (one bookie process), ``hosts``
(HostCluster), ``netns`` (hosts as network namespaces, faults between them), ``zookeeper``
(a ZooKeeper ensemble on those hosts), ``zookeeper_server`` (ZooKeeperServer), ``control``
(HostCluster's control host), ``delay_proxy`` (latency between hosts), ``spark``
(StandaloneSpark), ``tempdirs`` (temporary directories a later run can clean up).
"""

from walog.testing.cluster import BookieRef, LocalCluster
from walog.testing.hosts import HostCluster
from walog.testing.process import BookieProcess, LocalClusterError, free_port
from walog.testing.spark import StandaloneSpark
from walog.testing.zookeeper import ZooKeeperError
from walog.testing.zookeeper_server import ZooKeeperServer

__all__ = [
    "BookieProcess",
    "BookieRef",
    "HostCluster",
    "LocalCluster",
    "LocalClusterError",
    "StandaloneSpark",
    "ZooKeeperError",
    "ZooKeeperServer",
    "free_port",
]

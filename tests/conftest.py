"""Shared pytest fixtures.

Clusters of real bookie processes (``walog.testing.LocalCluster``), shared per test module
because starting bookies costs a second or two each:

- ``cluster``: 3 bookies with SQLite metadata.
- ``zk_cluster``: 3 bookies registered in the session's real ZooKeeper (``zookeeper``
  fixture), under a chroot of their own.

Both are **module-scoped**: tests in one module see each other's ledgers and logs, so give
yours unique names (or use the ``log_name`` fixture) and never assume an empty store. A test
that kills, stops or pauses a bookie of a shared cluster must bring it back (``restart`` /
``resume``) before it ends — or use ``fresh_cluster``, a function-scoped cluster of its own.
After every test that used one, a guard restarts (and reports) bookies it left down.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from walog.testing import LocalCluster, ZooKeeperError, ZooKeeperServer

SPARK_TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options of every Spark driver the tests start (this process's and the ``walog``
commands they run, through ``SPARK_SUBMIT_OPTS``): their jobs are short, and the JIT's
optimizing compiler took most of their CPU (one ``walog archive`` run on an idle machine:
51-53 CPU-seconds with it, 35-39 without), which the other test workers then lacked."""
os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_TEST_JVM)


def _ensure_all_running(cluster: LocalCluster) -> None:
    """Bring back bookies a test left down or paused, then fail loudly about it."""
    down = []
    for index, bookie_id in enumerate(cluster.bookie_ids):
        if cluster.is_paused(index):
            down.append(bookie_id)
            cluster.resume(index)
        elif not cluster.is_running(index):
            down.append(bookie_id)
            cluster.restart(index)
    if down:
        pytest.fail(f"the test left bookies of a shared cluster down: {', '.join(down)}")


@pytest.fixture(autouse=True)
def _restore_logging_config() -> Iterator[None]:
    """Commands run in-process (the CLI, ``walog bench``) configure structlog for their
    process, bound to the streams of the test that ran them: restore the configuration, so
    no later test logs to a stream that is closed by then."""
    saved = structlog.get_config()
    was_configured = structlog.is_configured()
    kazoo_level = logging.getLogger("kazoo").level
    yield
    logging.getLogger("kazoo").setLevel(kazoo_level)
    if was_configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _shared_cluster_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used a shared cluster, check that every bookie runs again."""
    yield
    for name in ("cluster", "zk_cluster"):
        if name in request.fixturenames:
            _ensure_all_running(request.getfixturevalue(name))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """3 real bookies with SQLite metadata, shared by the tests of one module."""
    data_dir = tmp_path_factory.mktemp("cluster")
    with LocalCluster(bookies=3, metadata="sqlite", data_dir=data_dir) as local:
        yield local


@pytest.fixture(scope="module")
def zk_cluster(zookeeper: ZooKeeperServer) -> Iterator[LocalCluster]:
    """3 real bookies on the session's ZooKeeper (own chroot), shared within a module."""
    # A short session timeout: a killed bookie's registration goes within seconds.
    uri = zookeeper.uri(f"/walog-cluster-{uuid.uuid4().hex[:12]}", session_timeout=4)
    with LocalCluster(bookies=3, metadata=uri) as local:
        yield local


@pytest.fixture(params=["sqlite", "zookeeper"])
def any_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """The module's shared cluster, once on SQLite (``cluster``) and once on ZooKeeper
    (``zk_cluster``): a test taking it runs against both metadata stores."""
    name = "cluster" if request.param == "sqlite" else "zk_cluster"
    cluster: LocalCluster = request.getfixturevalue(name)
    return cluster


@pytest.fixture
def fresh_cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    """3 real bookies with SQLite metadata for one test only (free to break them)."""
    with LocalCluster(bookies=3, metadata="sqlite", data_dir=tmp_path / "cluster") as local:
        yield local


@pytest.fixture
def log_name(request: pytest.FixtureRequest) -> str:
    """A log name unique to this test (shared clusters outlive single tests)."""
    return f"{request.node.name[:60]}-{uuid.uuid4().hex[:8]}".replace("[", "-").replace("]", "")


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """One real standalone ZooKeeper (Debian jars) for the whole test session."""
    try:
        server = ZooKeeperServer().start()
    except ZooKeeperError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def zk_uri(zookeeper: ZooKeeperServer) -> str:
    """A ``zk://`` URI with a chroot of this test's own on the session's ZooKeeper."""
    return zookeeper.uri(f"/test-{uuid.uuid4().hex[:12]}")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--slow`` runs the tests marked ``slow`` (skipped by default)."""
    parser.addoption("--slow", action="store_true", default=False, help="run slow tests")


def starts_zookeeper(item: pytest.Item) -> bool:
    """True when the test uses the session's ZooKeeper server (directly, through a fixture
    that needs it, or as the ZooKeeper run of ``any_cluster``)."""
    if "zookeeper" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("any_cluster") == "zookeeper"


LONG_FIRST = (
    "tests/spark/",
    "tests/hosts/test_mixed_faults.py",
    "tests/sim/",
    "tests/chaos/",
    "tests/hosts/",
)
"""Test directories (and modules) run first, in this order, so that with several workers
(``./test`` runs pytest-xdist) the longest do not start last and leave one worker running
alone at the end. The mixed run across hosts mostly waits out its faults: started early,
it runs beside the simulator's schedules, which only compute."""


def _long_first(item: pytest.Item) -> int:
    return next((i for i, d in enumerate(LONG_FIRST) if item.nodeid.startswith(d)), len(LONG_FIRST))


SHARED_WORKER = ("tests/spark/",)
"""Directories whose modules all run on one test worker (``--dist loadfile``): the Spark
modules then share that worker's one local Spark session instead of starting one JVM per
worker that gets a Spark module."""

SPREAD = ("tests/sim/",)
"""Directories whose tests each go to whichever worker is free (``--dist loadfile``): the
simulator's long runs of schedules hold no fixture beyond one test, and spread out they no
longer queue on one worker."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` with the modules of :data:`SHARED_WORKER` kept together, the
    tests of :data:`SPREAD` each on its own, handed out in the order of collection."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # xdist would hand out the modules with the most tests first, whatever their length:
    # the order of collection (LONG_FIRST) is the one wanted.
    config.option.loadscopereorder = False

    class SharedWorkerScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(SPREAD):
                return nodeid
            shared = next((d for d in SHARED_WORKER if nodeid.startswith(d)), None)
            return shared or super()._split_scope(nodeid)

    return SharedWorkerScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that starts ZooKeeper ``zk``; skip ``slow`` tests unless ``--slow``;
    order the longest directories first (:data:`LONG_FIRST`)."""
    items.sort(key=_long_first)  # stable: the order within each group stays
    for item in items:
        if starts_zookeeper(item):
            item.add_marker(pytest.mark.zk)
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow test: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``WALOG_TEST_TIMELINE=FILE``, append a line per test to FILE: the worker, when
    the test (setup to teardown) started and ended (seconds since the epoch) and its id.
    What ran where and when, to balance the suite's workers (``--durations`` has no
    order)."""
    path = os.environ.get("WALOG_TEST_TIMELINE")
    started = time.time()
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(path, "a") as out:
            out.write(f"{worker} {started:.2f} {time.time():.2f} {item.nodeid}\n")

"""walog.testing.LocalCluster runs real bookie processes and controls them by signals."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import walog
from walog.testing import LocalCluster, LocalClusterError


def _health(bookie_id: str, timeout: float = 1.0) -> int | None:
    """The bookie's health status, or None when it does not answer within ``timeout``."""
    with grpc.insecure_channel(bookie_id) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout
            )
        except grpc.RpcError:
            return None
    return int(reply.status)


def _available(cluster: LocalCluster) -> list[str]:
    with walog.connect(cluster.metadata_uri) as client:
        return client.bookies()


def test_started_bookies_serve_and_are_available(cluster: LocalCluster) -> None:
    assert len(cluster.bookie_ids) == 3
    assert len(set(cluster.bookie_ids)) == 3
    assert cluster.metadata_uri.startswith("sqlite:///")
    for bookie_id in cluster.bookie_ids:
        assert _health(bookie_id) == health_pb2.HealthCheckResponse.SERVING
        assert cluster.log_path(bookie_id).is_file()
    assert set(cluster.bookie_ids) <= set(_available(cluster))


def test_kill_crashes_and_restart_returns_with_same_id_and_data(cluster: LocalCluster) -> None:
    with walog.connect(cluster.metadata_uri) as client, client.create_ledger(3, 3, 3) as ledger:
        entry_id = ledger.append(b"survives a crash")
        ledger_id = ledger.ledger_id
    old_pid = cluster.pid(0)
    cluster.kill(0)
    assert not cluster.is_running(0)
    assert cluster.pid(0) is None
    assert _health(cluster.bookie_ids[0], timeout=0.5) is None
    cluster.restart(0)
    assert cluster.pid(0) not in (None, old_pid)
    assert _health(cluster.bookie_ids[0]) == health_pb2.HealthCheckResponse.SERVING
    assert cluster.bookie_ids[0] in _available(cluster)
    # The restarted bookie serves the entry from its own disk (E=Qw=3: it holds a copy).
    from walog.wire.proto import bookie_pb2 as pb
    from walog.wire.proto import bookie_pb2_grpc as pb_grpc

    with grpc.insecure_channel(cluster.bookie_ids[0]) as channel:
        reply = pb_grpc.BookieStub(channel).Read(
            pb.ReadRequest(ledger_id=ledger_id, first_entry_id=entry_id, last_entry_id=entry_id),
            timeout=10,
        )
    assert [e.data for e in reply.entries] == [b"survives a crash"]


def test_stop_exits_cleanly_and_unregisters(cluster: LocalCluster) -> None:
    bookie_id = cluster.bookie_ids[1]
    cluster.stop(1)
    assert not cluster.is_running(1)
    assert bookie_id not in _available(cluster)
    cluster.restart(1)
    assert bookie_id in _available(cluster)


def test_pause_freezes_and_resume_continues(cluster: LocalCluster) -> None:
    bookie_id = cluster.bookie_ids[2]
    cluster.pause(2)
    assert cluster.is_paused(2)
    assert _health(bookie_id, timeout=0.5) is None
    cluster.resume(2)
    assert not cluster.is_paused(2)
    cluster.wait_ready(2, timeout=30)
    assert _health(bookie_id) == health_pb2.HealthCheckResponse.SERVING


def test_a_paused_bookie_holds_no_write_lock_of_the_sqlite_store(tmp_path: Path) -> None:
    """Frozen inside its heartbeat's transaction, a bookie would stall every metadata write
    of the cluster: pause freezes it only between transactions (a heartbeat every 2 ms makes
    a freeze inside one likely)."""
    db = tmp_path / "meta.db"
    with LocalCluster(
        bookies=1, metadata=f"sqlite:///{db}?heartbeat=0.002", data_dir=tmp_path
    ) as local:
        for _ in range(30):
            local.pause(0)
            conn = sqlite3.connect(db, timeout=1.0, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")  # raises "database is locked" after 1 s
                conn.execute("ROLLBACK")
            finally:
                conn.close()
                local.resume(0)


def test_add_bookie_starts_a_new_available_bookie(tmp_path: Path) -> None:
    with LocalCluster(bookies=0, data_dir=tmp_path) as local:
        assert local.bookie_ids == []
        new_id = local.add_bookie()
        assert local.bookie_ids == [new_id]
        assert _available(local) == [new_id]
        second = local.add_bookie()
        assert local.bookie_dir(second) != local.bookie_dir(new_id)
        assert sorted(_available(local)) == sorted([new_id, second])


def test_bookies_are_addressed_by_index_or_id(cluster: LocalCluster) -> None:
    assert cluster.pid(cluster.bookie_ids[0]) == cluster.pid(0)
    with pytest.raises(IndexError):
        cluster.pid(99)
    with pytest.raises(KeyError, match="no bookie"):
        cluster.pid("127.0.0.1:1")


def test_signals_to_a_bookie_that_is_not_running_are_refused(tmp_path: Path) -> None:
    with LocalCluster(bookies=1, data_dir=tmp_path) as local:
        local.kill(0)
        for action in (local.kill, local.stop, local.pause, local.resume, local.wait_ready):
            with pytest.raises(LocalClusterError, match="is not running"):
                action(0)


def test_failed_start_raises_with_the_bookie_log_and_cleans_up() -> None:
    local = LocalCluster(bookies=1, bookie_args=["--group-wait-s", "-1"], start_timeout=60)
    with pytest.raises(LocalClusterError, match="group-wait-s") as info:
        local.start()
    assert "exited with status" in str(info.value)
    assert not local.data_dir.exists()


def test_bad_metadata_uri_is_refused_before_any_bookie_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="metadata"):
        LocalCluster(bookies=1, metadata="mysql://nope", data_dir=tmp_path).start()
    assert not (tmp_path / "bookies").exists()


def test_given_data_dir_is_kept_and_temporary_one_removed(tmp_path: Path) -> None:
    with LocalCluster(bookies=1, data_dir=tmp_path / "kept") as kept:
        assert kept.metadata_uri == f"sqlite:///{tmp_path / 'kept' / 'meta.db'}"
    assert (tmp_path / "kept" / "meta.db").exists()
    assert (tmp_path / "kept" / "logs" / "bookie-0.log").exists()
    with LocalCluster(bookies=0) as temporary:
        path = temporary.data_dir
        assert path.exists()
    assert not path.exists()


@pytest.mark.zk
def test_zookeeper_cluster_kill_restart_and_stop(zk_cluster: LocalCluster) -> None:
    assert zk_cluster.metadata_uri.startswith("zk://")
    assert set(zk_cluster.bookie_ids) <= set(_available(zk_cluster))
    zk_cluster.kill(0)
    zk_cluster.restart(0)
    assert zk_cluster.bookie_ids[0] in _available(zk_cluster)
    zk_cluster.stop(1)
    assert zk_cluster.bookie_ids[1] not in _available(zk_cluster)
    zk_cluster.restart(1)
    with walog.connect(zk_cluster.metadata_uri) as client, client.create_ledger() as ledger:
        assert ledger.append(b"on zookeeper") == 0

"""The bookie restart scenario of ``walog bench``: SIGKILL a filled bookie and time its return.

Two moments are timed from the restart on. The bookie *serves again* once its gRPC health
service answers SERVING: its journal is replayed and it answers reads and adds of the
ledgers it holds. It is *registered again* once its availability record, written by the new
process, is in the metadata store: only then do new ensembles pick it. Between the two the
bookie waits for its killed predecessor's record to go with that process's metadata
session (bookie/registration.py): up to the session timeout after the kill (3 s for the
local cluster's SQLite store, 10 s for ZooKeeper by default), however fast it replayed.

The bookie's own account of its replay (records, bytes, seconds) is read from its metrics.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bookie.storage.journal_files import journal_files
from walog.testing import LocalCluster

POLL_S = 0.005
"""How often the restarted bookie's health is asked while it starts."""

_REPLAY_METRICS = {
    "walog_bookie_journal_replayed_records": "records",
    "walog_bookie_journal_replayed_bytes": "bytes",
    "walog_bookie_journal_replay_seconds": "seconds",
}


def restart_killed(cluster: LocalCluster, index: int, timeout_s: float) -> dict[str, float]:
    """SIGKILL bookie ``index`` of ``cluster`` (metrics on), start it again and time it.

    Returns the seconds until it served again (``serving_s``) and until it was registered
    again (``registered_s``), the journal bytes on disk after the restart (``journal_bytes``)
    and the replay's own figures (``replayed_records``, ``replayed_bytes``, ``replay_s``).

    Raises:
        RuntimeError: the bookie exited, or did not serve within ``timeout_s``.
    """
    cluster.kill(index)
    started = time.perf_counter()
    cluster.restart(index, wait=False)
    _wait_serving(cluster, index, started + timeout_s)
    serving = time.perf_counter() - started
    cluster.wait_ready(index, timeout=timeout_s)
    registered = time.perf_counter() - started
    replay = _replay_figures(cluster.metrics_url(index))
    return {
        "serving_s": serving,
        "registered_s": registered,
        "journal_bytes": float(journal_bytes(cluster.bookie_dir(index))),
        "replayed_records": replay["records"],
        "replayed_bytes": replay["bytes"],
        "replay_s": replay["seconds"],
    }


def journal_bytes(bookie_dir: Path) -> int:
    """Bytes of journal records on disk after a restart: the files replay cut to their
    records' end (space reserved past them is released by replay), without the file the
    restarted bookie has just opened."""
    found = journal_files(bookie_dir / "journal")
    return sum(path.stat().st_size for _, path in found[:-1])


def _wait_serving(cluster: LocalCluster, index: int, deadline: float) -> None:
    """Ask the bookie's health service every :data:`POLL_S` on a fresh channel (a channel
    that failed to connect waits about a second before it tries again) until it answers
    SERVING."""
    request = health_pb2.HealthCheckRequest()
    address = cluster.bookie_ids[index]
    while True:
        if not cluster.is_running(index):
            problem = "exited while starting"
            raise RuntimeError(f"bookie {address} {problem}:\n{cluster.log_tail(index)}")
        with grpc.insecure_channel(address) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(request, timeout=0.5)
            except grpc.RpcError:
                reply = None
        if reply is not None and reply.status == health_pb2.HealthCheckResponse.SERVING:
            return
        if time.perf_counter() > deadline:
            problem = "did not serve in time"
            raise RuntimeError(f"bookie {address} {problem}:\n{cluster.log_tail(index)}")
        time.sleep(POLL_S)


def _replay_figures(metrics_url: str) -> dict[str, float]:
    """The replay gauges of a bookie's ``/metrics``, by short name."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10.0) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for name, short in _REPLAY_METRICS.items():
        match = re.search(rf"^{name}{{[^}}]*}} (\S+)$", text, re.MULTILINE)
        if match is None:
            raise RuntimeError(f"{metrics_url}/metrics has no {name}")
        found[short] = float(match[1])
    return found


__all__ = ["POLL_S", "journal_bytes", "restart_killed"]

"""The ``hosts`` scenario: the same appends between hosts and on loopback, side by side.

Two clusters of six bookies over three racks, measured one after the other with the same
client (a process of its own, :func:`client_main`): one on loopback
(:class:`~walog.testing.LocalCluster`, SQLite metadata; its clients reach the bookies
through their Unix sockets), one across hosts (:class:`~walog.testing.HostCluster`: each
bookie in a network namespace of its own behind a veth pair and a bridge, a three-node
ZooKeeper ensemble; the client on a client host, over TCP). Both on this machine's cores:
the difference is the network path, not the hardware. Needs root for the hosts; without
it the scenario is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import walog.aio
from walog.bench import scenarios
from walog.errors import WalogError

RACKS = ["rack-1", "rack-2", "rack-3"]


async def _measure(uri: str, seconds: float) -> dict[str, float]:
    async with await walog.aio.connect(uri) as client:
        rate = await scenarios.ledger_append(client, seconds)
        latency = await scenarios.append_latency(client, seconds)
    return {
        "append_eps": round(rate.per_second),
        "append_p50_ms": round(latency.latency.percentile_ms(50), 3),
        "append_p99_ms": round(latency.latency.percentile_ms(99), 3),
    }


def client_main() -> None:
    """``python -m walog.bench.hosts URI SECONDS``: measure, print one JSON line."""
    uri, seconds = sys.argv[1], float(sys.argv[2])
    print(json.dumps(asyncio.run(_measure(uri, seconds))), flush=True)


def _client_result(proc: subprocess.Popen[bytes], where: str) -> dict[str, float]:
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise WalogError(f"bench client on {where} failed: {err.decode()[-1000:]}")
    result: dict[str, float] = json.loads(out.decode().splitlines()[-1])
    return result


def _command(uri: str, seconds: float) -> list[str]:
    return [sys.executable, "-m", "walog.bench.hosts", uri, str(seconds)]


def measure(seconds: float, data_dir: Path) -> tuple[dict[str, Any], str | None]:
    """``hosts_*`` and ``loopback6_*`` results, or ({}, why) when hosts cannot be made."""
    from walog.testing import HostCluster, LocalCluster
    from walog.testing.process import _package_root

    env = dict(os.environ, PYTHONPATH=str(_package_root()))
    results: dict[str, Any] = {}
    with LocalCluster(bookies=6, racks=RACKS, data_dir=data_dir / "loopback") as local:
        proc = subprocess.Popen(
            _command(local.metadata_uri, seconds),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for key, value in _client_result(proc, "loopback").items():
            results[f"loopback6_{key}"] = value
    hosts = HostCluster(bookies=6, racks=3, clients=1, data_dir=data_dir / "hosts")
    try:
        hosts.start()
    except WalogError as exc:
        return results, f"hosts cannot be made here: {str(exc).splitlines()[0]}"
    try:
        command = ["python", *_command(hosts.metadata_uri, seconds)[1:]]
        proc = hosts.popen("c1", command, log=subprocess.PIPE)
        for key, value in _client_result_stdout_only(proc).items():
            results[f"hosts_{key}"] = value
    finally:
        hosts.close()
    return results, None


def _client_result_stdout_only(proc: subprocess.Popen[bytes]) -> dict[str, float]:
    out, _ = proc.communicate(timeout=600)
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise WalogError(f"bench client on a client host failed: {out.decode()[-1000:]}")
    result: dict[str, float] = json.loads(lines[-1])
    return result


if __name__ == "__main__":
    client_main()

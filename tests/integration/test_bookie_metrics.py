"""The bookie's metrics port: Prometheus series that count what a workload did, liveness and
readiness probes, and the gRPC health of writes, for a writable and a read-only bookie."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from bookie.server.health import WRITES_SERVICE
from tests.integration.bookies import BookieProcess, free_port, make_add, send_frames
from tests.integration.disks import fill, small_tmpfs
from walog.testing import LocalCluster
from walog.wire.digest import master_key
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(base: str) -> dict[str, float]:
    """Every sample at ``base/metrics`` by ``name`` plus its labels other than ``bookie``
    (``name,label=value,...``, labels sorted)."""
    status, text = _get(f"{base}/metrics")
    assert status == 200, text
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sorted((k, v) for k, v in sample.labels.items() if k != "bookie")
            samples[sample.name + "".join(f",{k}={v}" for k, v in labels)] = sample.value
    return samples


async def _health_becomes(bookie: BookieProcess, service: str, want: int) -> bool:
    """True once the gRPC health of ``service`` is ``want`` (a Watch stream; 30 s at most)."""
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        async with asyncio.timeout(30):
            async for reply in stub.Watch(health_pb2.HealthCheckRequest(service=service)):
                if reply.status == want:
                    return True
    return False


def _started(tmp_path: Path, *extra: str) -> tuple[BookieProcess, str]:
    port = free_port()
    bookie = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=["--metrics-port", str(port), *extra],
    )
    bookie.start().wait_ready()
    return bookie, f"http://127.0.0.1:{port}"


@pytest.fixture
def metered_bookie(tmp_path: Path) -> Iterator[tuple[BookieProcess, str]]:
    bookie, base = _started(tmp_path)
    yield bookie, base
    bookie.stop_quietly()


async def _wait_ready(base: str, *, writes: bool, want: int) -> str:
    """The /readyz answer once its status is ``want`` (the registration and the health
    watch follow the bookie's state within a second; 30 s at most)."""
    url = f"{base}/readyz" + ("?writes=1" if writes else "")
    async with asyncio.timeout(30):
        while True:
            status, text = await asyncio.to_thread(_get, url)
            if status == want:
                return text
            await asyncio.sleep(0.1)


async def test_bookie_metrics_count_the_adds_and_reads_a_workload_made(
    metered_bookie: tuple[BookieProcess, str],
) -> None:
    bookie, base = metered_bookie
    frames = [
        pb.AddFrame(
            batches=[make_add(7, entry, b"x" * 100) for entry in range(f * 10, f * 10 + 10)]
        )
        for f in range(3)
    ]
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        stub = pb_grpc.BookieStub(channel)
        results, _ = await send_frames(stub, frames)
        assert {r.status for r in results} == {pb.OK}
        for first in (0, 10):
            reply = await stub.Read(
                pb.ReadRequest(ledger_id=7, first_entry_id=first, last_entry_id=first + 9)
            )
            assert reply.status == pb.OK
        fenced = await stub.Fence(pb.FenceRequest(ledger_id=7, master_key=master_key(b"")))
        assert fenced.status == pb.OK
    samples = await asyncio.to_thread(scrape, base)
    assert samples["walog_bookie_adds_total"] == 30
    assert samples["walog_bookie_stored_entries_total"] == 30
    assert samples["walog_bookie_failed_adds_total"] == 0
    assert samples["walog_bookie_add_latency_seconds_count"] == 30  # one per add batch
    # Journal records: the 30 adds, the ledger's master key and its fence.
    assert samples["walog_bookie_journal_group_entries_sum"] == 32
    syncs = samples["walog_bookie_journal_syncs_total"]
    assert 1 <= syncs == samples["walog_bookie_journal_fsync_seconds_count"]
    assert samples["walog_bookie_reads_total"] == 2
    assert samples["walog_bookie_read_entries_total"] == 20
    assert samples["walog_bookie_read_bytes_total"] == 20 * 100
    assert samples["walog_bookie_read_latency_seconds_count"] == 2
    assert samples["walog_bookie_read_only"] == 0
    assert samples["walog_bookie_ledgers"] == 1
    assert samples["walog_bookie_fenced_ledgers"] == 1
    assert samples["walog_bookie_fences_total"] == 1
    # Nothing checkpointed yet: the entries are in the journal and the write cache.
    assert samples["walog_bookie_entry_logs"] == samples["walog_bookie_checkpoints_total"] == 0


async def test_a_writable_bookie_is_alive_ready_and_serving_writes(
    metered_bookie: tuple[BookieProcess, str],
) -> None:
    bookie, base = metered_bookie
    assert await asyncio.to_thread(_get, f"{base}/healthz") == (200, "alive\n")
    assert await _wait_ready(base, writes=True, want=200) == "writable\n"
    serving = health_pb2.HealthCheckResponse.SERVING
    assert await _health_becomes(bookie, WRITES_SERVICE, serving)
    assert await _health_becomes(bookie, "", serving)
    status, text = await asyncio.to_thread(_get, f"{base}/nothing-here")
    assert status == 404 and "/metrics" in text


async def test_a_bookie_whose_journal_disk_is_full_is_ready_for_reads_but_not_writes(
    tmp_path: Path,
) -> None:
    with small_tmpfs(16) as journal_dir:
        bookie, base = _started(
            tmp_path, "--journal-dir", str(journal_dir), "--journal-file-bytes", "8MiB"
        )
        try:
            await _wait_ready(base, writes=True, want=200)
            await asyncio.to_thread(fill, journal_dir)
            # More than the journal's reserved space ahead: the next writes hit ENOSPC.
            big = b"y" * (1024 * 1024)
            frames = [pb.AddFrame(batches=[make_add(3, entry, big)]) for entry in range(6)]
            async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
                results, _ = await send_frames(pb_grpc.BookieStub(channel), frames)
            assert pb.IO_ERROR in {r.status for r in results}
            text = await _wait_ready(base, writes=True, want=503)
            assert text.startswith("read-only: journal failed")
            assert await _wait_ready(base, writes=False, want=200) == text
            not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
            assert await _health_becomes(bookie, WRITES_SERVICE, not_serving)
            serving = health_pb2.HealthCheckResponse.SERVING
            assert await _health_becomes(bookie, "walog.bookie.v1.Bookie", serving)
            samples = await asyncio.to_thread(scrape, base)
            assert samples["walog_bookie_read_only"] == 1
            assert samples["walog_bookie_failed_adds_total"] >= 1
            assert samples["walog_bookie_disk_free_bytes,dir=journal"] < 1024 * 1024
        finally:
            bookie.stop_quietly()


def test_a_local_cluster_bookie_whose_metrics_port_was_taken_moves_to_another(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import walog.testing.cluster as cluster_module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([free_port(), port])  # the gRPC port, then the metrics port: taken

        def pick(host: str = "127.0.0.1") -> int:
            return next(picks, None) or free_port(host)

        monkeypatch.setattr(cluster_module, "free_port", pick)
        with LocalCluster(bookies=1, data_dir=tmp_path / "cluster", metrics=True) as cluster:
            base = cluster.metrics_url(0)
            assert not base.endswith(f":{port}")
            assert _get(f"{base}/healthz") == (200, "alive\n")


async def test_a_stopping_bookie_tells_watchers_it_no_longer_serves_reads_or_writes(
    tmp_path: Path,
) -> None:
    bookie, _ = _started(tmp_path)
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    try:
        seen: dict[str, list[int]] = {"": [], WRITES_SERVICE: []}
        watching = {service: asyncio.Event() for service in seen}

        async def watch(service: str) -> None:
            """Record the statuses from the first SERVING on, until NOT_SERVING."""
            async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                request = health_pb2.HealthCheckRequest(service=service)
                with contextlib.suppress(grpc.aio.AioRpcError):  # the server goes away
                    async for reply in stub.Watch(request):
                        if reply.status == serving:
                            watching[service].set()
                        if watching[service].is_set():
                            seen[service].append(reply.status)
                        if reply.status == not_serving and watching[service].is_set():
                            return

        watchers = [asyncio.create_task(watch(service)) for service in seen]
        async with asyncio.timeout(30):
            for event in watching.values():
                await event.wait()
        bookie.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        async with asyncio.timeout(30):
            await asyncio.gather(*watchers)
        assert seen == {"": [serving, not_serving], WRITES_SERVICE: [serving, not_serving]}
        assert await asyncio.to_thread(bookie.proc.wait, 30) == 0  # type: ignore[union-attr]
    finally:
        bookie.stop_quietly()

"""The bookie process: registration and clean shutdown, bad input on the port and on the
command line, bearer tokens, metrics, add latency by stage, GC of deleted ledgers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.bookies import (
    REPO_ROOT,
    BookieProcess,
    answers,
    free_port,
    make_add,
    send_frames,
)
from tests.pki import make_certificates
from walog.latency import STAGES, percentile_us
from walog.metadata import open_store
from walog.metadata.layout import LedgerMetadata, LedgerState, bookie_path, ledger_path
from walog.metadata.store import MetadataStore, NodeNotFoundError
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc


@pytest.fixture(params=["sqlite", pytest.param("zk", marks=pytest.mark.zk)])
def metadata_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/meta.db"
    # The session's real ZooKeeper, a chroot of this test's own, short sessions so a
    # killed bookie's ephemeral registration expires quickly.
    zookeeper = request.getfixturevalue("zookeeper")
    return str(zookeeper.uri(f"/bookie-{uuid.uuid4().hex[:12]}", session_timeout=4))


async def test_sigterm_unregisters_and_exits_zero(metadata_uri: str, tmp_path: Path) -> None:
    bookie = BookieProcess(tmp_path / "bookie", metadata_uri)
    store = await open_store(metadata_uri)
    try:
        bookie.start().wait_ready()
        # Registration follows SERVING; wait for the record through a watch, not a sleep.
        assert await _wait_for(store, bookie_path(bookie.bookie_id), bool, 20)
        assert bookie.terminate() == 0
        assert "bookie stopped" in bookie.log()
        assert await store.exists(bookie_path(bookie.bookie_id)) is None
    finally:
        bookie.stop_quietly()
        await store.close()


async def test_restart_after_sigkill_waits_out_the_stale_registration(
    metadata_uri: str, tmp_path: Path
) -> None:
    bookie = BookieProcess(tmp_path / "bookie", metadata_uri)
    store = await open_store(metadata_uri)
    path = bookie_path(bookie.bookie_id)
    try:
        bookie.start().wait_ready()
        assert await _wait_for(store, path, bool, 20)
        first, _ = await store.get(path)
        bookie.kill()
        # The dead process's record outlives it until its session expires; the new
        # process waits for that instead of failing, then registers itself.
        bookie.start().wait_ready()
        current = await _wait_for(store, path, lambda data: data not in (None, first), 40)
        assert current is not None
        assert json.loads(current)["started"] > json.loads(first)["started"]
    finally:
        bookie.stop_quietly()
        await store.close()


async def _wait_for(
    store: MetadataStore, path: str, done: Callable[[bytes | None], bool], within: float
) -> bytes | None:
    """Wait (on the store's watch, no polling) until ``done(record data or None)``."""
    changed = asyncio.Event()
    loop = asyncio.get_running_loop()
    cancel = store.watch(path, lambda: loop.call_soon_threadsafe(changed.set))
    try:
        async with asyncio.timeout(within):
            while True:
                changed.clear()
                try:
                    data: bytes | None = (await store.get(path))[0]
                except NodeNotFoundError:
                    data = None
                if done(data):
                    return data
                await changed.wait()
    finally:
        cancel()


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[BookieProcess]:
    process = BookieProcess(tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db")
    process.start().wait_ready()
    yield process
    process.stop_quietly()


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
async def test_a_bookie_serves_on_the_event_loop_walog_event_loop_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv("WALOG_EVENT_LOOP", kind)  # inherited by the bookie process
    bookie = BookieProcess(tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db")
    bookie.start().wait_ready()
    try:
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            results, _ = await send_frames(stub, [pb.AddFrame(batches=[make_add(3, 0, b"x")])])
            assert [r.status for r in results] == [pb.OK]
        serving = [line for line in bookie.log().splitlines() if "bookie serving" in line]
        assert json.loads(serving[-1])["event_loop"] == kind
    finally:
        bookie.stop_quietly()


def test_garbage_bytes_on_the_port_do_not_crash_the_bookie(bookie: BookieProcess) -> None:
    for junk in (b"\x00\xff" * 5000, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n"):
        # The bookie may reset the connection at any point of this exchange (or keep it
        # waiting for a valid preface); what matters is that it keeps serving.
        with (
            socket.create_connection(("127.0.0.1", bookie.port), timeout=5) as raw,
            contextlib.suppress(OSError),
        ):
            raw.sendall(junk)
            raw.shutdown(socket.SHUT_WR)
            while raw.recv(4096):
                pass
    assert bookie.proc is not None and bookie.proc.poll() is None
    with grpc.insecure_channel(bookie.bookie_id) as channel:
        info = pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)
    assert info.bookie_id == bookie.bookie_id


def _run_bookie(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bookie", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_bad_flags_exit_2_with_one_clear_line(tmp_path: Path) -> None:
    result = _run_bookie(
        "--data-dir", str(tmp_path), "--listen", "no-port", "--metadata", "sqlite:///x.db"
    )
    assert result.returncode == 2
    assert "--listen must be HOST:PORT" in result.stderr.strip().splitlines()[-1]


def test_port_in_use_is_refused_with_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run_bookie(
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            f"127.0.0.1:{port}",
            "--metadata",
            f"sqlite:///{tmp_path}/meta.db",
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr.strip().splitlines()[-1]


def test_auth_token_is_required_except_for_health(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    bookie = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=["--auth-token-file", str(token_file)],
    )
    try:
        bookie.start().wait_ready()  # health answers without a token
        with grpc.insecure_channel(bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            for metadata in ((), (("authorization", "Bearer wrong"),)):
                with pytest.raises(grpc.RpcError) as denied:
                    stub.Info(pb.InfoRequest(), timeout=10, metadata=metadata)
                assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
            info = stub.Info(
                pb.InfoRequest(), timeout=10, metadata=(("authorization", "Bearer s3cret"),)
            )
            assert info.bookie_id == bookie.bookie_id
    finally:
        bookie.stop_quietly()


@pytest.fixture
async def gc_bookie(tmp_path: Path) -> AsyncIterator[BookieProcess]:
    metrics_port = free_port()
    bookie = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=[
            "--gc-interval-s", "0.2", "--gc-grace-s", "0",
            "--gc-stray-interval-s", "0.2", "--gc-stray-grace-s", "0",
            "--metrics-port", str(metrics_port),
        ],
    )  # fmt: skip
    bookie.metrics_port = metrics_port  # type: ignore[attr-defined]
    bookie.start().wait_ready()
    yield bookie
    bookie.stop_quietly()


async def test_gc_deletes_only_ledgers_whose_metadata_is_gone(
    gc_bookie: BookieProcess, tmp_path: Path
) -> None:
    store = await open_store(gc_bookie.metadata)
    try:
        await store.create(ledger_path(10), b"{}")
        async with grpc.aio.insecure_channel(gc_bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            results, _ = await send_frames(
                stub, [pb.AddFrame(batches=[make_add(10, 0, b"kept"), make_add(11, 0, b"gone")])]
            )
            assert {r.status for r in results} == {pb.OK}
            async with asyncio.timeout(30):
                listed = await stub.ListLedgers(pb.ListLedgersRequest())
                while 11 in listed.ledger_ids:
                    # The GC runs in the bookie process; its effect is only observable by
                    # asking again. Each round is one RPC, bounded by the timeout above.
                    await asyncio.sleep(0.1)
                    listed = await stub.ListLedgers(pb.ListLedgersRequest())
            assert list(listed.ledger_ids) == [10]
        url = f"http://127.0.0.1:{gc_bookie.metrics_port}/metrics"  # type: ignore[attr-defined]
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
        assert b"walog_bookie_gc_deleted_ledgers_total" in text
        assert b"walog_bookie_adds_total" in text
    finally:
        await store.close()


async def _wait_until_listed(stub: pb_grpc.BookieStub, wanted: list[int]) -> list[int]:
    """The bookie's ledgers once they are ``wanted`` (the GC runs in the bookie process; its
    effect is only observable by asking again, one RPC a round, for at most 30 s)."""
    async with asyncio.timeout(30):
        while True:
            listed = sorted((await stub.ListLedgers(pb.ListLedgersRequest())).ledger_ids)
            if listed == wanted:
                return listed
            await asyncio.sleep(0.1)


async def test_gc_deletes_stray_copies_of_closed_ledgers_whose_ensembles_no_longer_name_the_bookie(
    gc_bookie: BookieProcess,
) -> None:
    me, other = gc_bookie.bookie_id, "127.0.0.1:1"

    def ledger(
        ledger_id: int, state: LedgerState, *ensembles: tuple[int, tuple[str, ...]]
    ) -> bytes:
        metadata = LedgerMetadata(ledger_id, 1, 1, 1, state, 9, tuple(ensembles))
        return metadata.to_json()

    store = await open_store(gc_bookie.metadata)
    try:
        # 20: closed, never named this bookie (a copy made for a swap that did not happen).
        await store.create(ledger_path(20), ledger(20, "CLOSED", (0, (other,))))
        # 21: closed, this bookie holds its first fragment.
        await store.create(ledger_path(21), ledger(21, "CLOSED", (0, (me,)), (5, (other,))))
        # 22: open (its ensembles may still change): never collected by this rule.
        await store.create(ledger_path(22), ledger(22, "OPEN", (0, (other,))))
        # 23: a record that cannot be read is no reason to delete anything.
        await store.create(ledger_path(23), b"not json")
        async with grpc.aio.insecure_channel(gc_bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            adds = [make_add(ledger_id, 0, b"copy") for ledger_id in (20, 21, 22, 23)]
            results, _ = await send_frames(stub, [pb.AddFrame(batches=adds)])
            assert {r.status for r in results} == {pb.OK}
            assert await _wait_until_listed(stub, [21, 22, 23]) == [21, 22, 23]
            # Closed with an ensemble that names this bookie: the copy is live.
            _, version = await store.get(ledger_path(22))
            await store.set(ledger_path(22), ledger(22, "CLOSED", (0, (me,))), version)
            await asyncio.sleep(1.0)  # several scans
            assert await _wait_until_listed(stub, [21, 22, 23]) == [21, 22, 23]
        url = f"http://127.0.0.1:{gc_bookie.metrics_port}/metrics"  # type: ignore[attr-defined]
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
        assert re.search(rb"walog_bookie_gc_deleted_stray_copies_total(\{[^}]*\})? 1(\.0)?\n", text)
    finally:
        await store.close()


def test_health_reports_serving(bookie: BookieProcess) -> None:
    with grpc.insecure_channel(bookie.bookie_id) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service="walog.bookie.v1.Bookie"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_adds_over_the_inflight_bound_get_too_many_requests(tmp_path: Path) -> None:
    bound = 1024 * 1024
    bookie = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=["--max-inflight-bytes", str(bound), "--max-entry-bytes", str(bound)],
    )

    async def scenario() -> list[list[int]]:
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            big = [make_add(12, e, bytes(600_000)) for e in range(3)]
            # One frame: the adds are admitted in order before any completes, so the first
            # fits and the other two would exceed the bound.
            first, _ = await send_frames(stub, [pb.AddFrame(batches=big)])
            # Once answered, the bytes are released: the same adds fit again one by one.
            again, _ = await send_frames(stub, [pb.AddFrame(batches=[big[1]])])
            return [
                sorted((r.entry_id, r.status) for r in first),
                [r.status for r in again],
            ]

    try:
        bookie.start().wait_ready()
        first, again = asyncio.run(scenario())
        assert first == [(0, pb.OK), (1, pb.TOO_MANY_REQUESTS), (2, pb.TOO_MANY_REQUESTS)]
        assert again == [pb.OK]
    finally:
        bookie.stop_quietly()


async def test_sigterm_ends_open_add_streams_cleanly(tmp_path: Path) -> None:
    bookie = BookieProcess(tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db")
    try:
        bookie.start().wait_ready()
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            call = pb_grpc.BookieStub(channel).Add()
            await call.write(pb.AddFrame(batches=[make_add(13, 0, b"before drain")]))
            responses = call.__aiter__()
            first = await responses.__anext__()
            assert [r.status for r in answers(first.results)] == [pb.OK]
            # The client keeps its stream open; the drain must end it, not wait forever.
            bookie.signal(signal.SIGTERM)
            remaining = [frame async for frame in responses]
            assert remaining == []
            assert await call.code() == grpc.StatusCode.OK
        assert await asyncio.to_thread(bookie.wait) == 0
    finally:
        bookie.stop_quietly()


@pytest.fixture
def certificates(tmp_path: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate."""
    return make_certificates(tmp_path / "pki")


def test_mutual_tls_requires_a_client_certificate(tmp_path: Path, certificates: Path) -> None:
    d = certificates
    bookie = BookieProcess(
        tmp_path / "bookie",
        f"sqlite:///{tmp_path}/meta.db",
        extra_args=[
            "--tls-cert",
            str(d / "server.pem"),
            "--tls-key",
            str(d / "server.key"),
            "--tls-ca",
            str(d / "ca.pem"),
        ],
    )
    ca = (d / "ca.pem").read_bytes()
    bookie.channel_credentials = grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=(d / "client.key").read_bytes(),
        certificate_chain=(d / "client.pem").read_bytes(),
    )
    try:
        bookie.start().wait_ready()
        with bookie.channel() as channel:
            info = pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)
        assert info.bookie_id == bookie.bookie_id
        anonymous = grpc.ssl_channel_credentials(root_certificates=ca)
        with (
            grpc.secure_channel(bookie.bookie_id, anonymous) as channel,
            pytest.raises(grpc.RpcError) as refused,
        ):
            pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        with (
            grpc.insecure_channel(bookie.bookie_id) as channel,
            pytest.raises(grpc.RpcError),
        ):
            pb_grpc.BookieStub(channel).Info(pb.InfoRequest(), timeout=10)
    finally:
        bookie.stop_quietly()


@contextlib.asynccontextmanager
async def _draining_bookie(
    tmp_path: Path,
) -> AsyncIterator[tuple[BookieProcess, pb_grpc.BookieAsyncStub]]:
    """A bookie with a long drain timeout and a stub to it; after the body, the bookie must
    have exited 0 (the body sends it SIGTERM)."""
    bookie = BookieProcess(
        tmp_path / "bookie", f"sqlite:///{tmp_path}/meta.db", extra_args=["--drain-timeout-s", "30"]
    )
    try:
        bookie.start().wait_ready()
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            stub: pb_grpc.BookieAsyncStub = pb_grpc.BookieStub(channel)
            yield bookie, stub
        assert await asyncio.to_thread(bookie.wait) == 0
    finally:
        bookie.stop_quietly()


async def test_sigterm_answers_held_long_polls_at_once(tmp_path: Path) -> None:
    async with _draining_bookie(tmp_path) as (bookie, stub):
        await send_frames(stub, [pb.AddFrame(batches=[make_add(14, 0, b"x")])])
        call = stub.Read(
            pb.ReadRequest(
                ledger_id=14,
                first_entry_id=1,
                last_entry_id=1,
                previous_lac=5,
                long_poll_timeout_ms=120_000,
            )
        )
        # The poll is held (LAC -1 <= 5) until the bookie is told to stop; it is answered
        # then, long before either the poll's or the drain's timeout.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(call), timeout=1.0)
        bookie.signal(signal.SIGTERM)
        reply = await asyncio.wait_for(call, timeout=15)
        assert (reply.status, reply.lac) == (pb.OK, -1)


async def test_sigterm_ends_lac_watches_at_once(tmp_path: Path) -> None:
    async with _draining_bookie(tmp_path) as (bookie, stub):
        call = stub.WatchLac(pb.WatchLacRequest(ledger_id=14, previous_lac=5, heartbeat_ms=120_000))
        read = asyncio.ensure_future(call.read())
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(read), timeout=1.0)
        bookie.signal(signal.SIGTERM)
        # The watch is answered once more and ends, long before the drain timeout.
        reply = await asyncio.wait_for(read, timeout=15)
        assert (reply.status, reply.lac) == (pb.OK, -1)
        assert await asyncio.wait_for(call.read(), timeout=15) is grpc.aio.EOF


async def test_info_reports_where_add_time_goes_by_stage(bookie: BookieProcess) -> None:
    async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
        stub = pb_grpc.BookieStub(channel)

        async def counts() -> dict[str, list[int]]:
            info = await stub.Info(pb.InfoRequest(), timeout=10)
            return {s.stage: list(s.counts) for s in info.latencies}

        before = await counts()
        ledger_id = 40_000_000 + uuid.uuid4().int % 1_000_000
        for entry_id in range(5):  # one frame, one journal group, one sync at a time
            await send_frames(stub, [pb.AddFrame(batches=[make_add(ledger_id, entry_id, b"x")])])
        after = await counts()
    assert set(after) == set(STAGES)
    spent = {
        stage: [a - b for a, b in zip(after[stage], before[stage], strict=True)] for stage in STAGES
    }
    assert all(sum(spent[stage]) >= 5 for stage in STAGES), spent
    # An add's time covers its sync.
    add_p50, sync_p50 = percentile_us(spent["add"], 50), percentile_us(spent["journal_sync"], 50)
    assert add_p50 is not None and sync_p50 is not None
    assert add_p50 >= sync_p50 > 1

"""The walog benchmark scenarios, each measured against a running cluster.

Every scenario runs for a wall-clock budget (``seconds``) rather than a fixed count, so the
same command finishes in predictable time on a fast or a busy machine. Throughput scenarios
keep a window of appends in flight; latency scenarios keep exactly one.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import struct
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import walog.aio
from walog.aio import AsyncClient
from walog.bench.stats import Latency, Rate, payload
from walog.client import connect
from walog.errors import WalogError
from walog.latency import percentile_us
from walog.log.position import Position
from walog.transport.network import NetworkBookieClient
from walog.wire.durability import Durability

Progress = Callable[[int], None]
"""Called with a count of operations just completed (drives a progress bar)."""

ENTRY_BYTES = 1024
RECORD_BYTES = 100
ENSEMBLE = (3, 3, 2)  # E, Qw, Qa for every scenario
# Ledger appends in flight in the throughput scenarios (NATS gets as many). Frames carry up
# to 512 entries, so 1024 keeps two frames in flight to each bookie: with one (256 in
# flight), the client idles for every round trip, 57,734 entries/s instead of 77-84k in
# `walog bench --only ledger --seconds 10` (NATS: 20.1k at 256, 20.0k at 1024).
LEDGER_WINDOW = 1024
LOG_WINDOW = 32768  # log records in flight
LOG_BATCH = 1024  # records handed to the log writer per event-loop turn
LEDGER_BATCH = 64  # entries per append_many_async call of the sync ledger scenario
_STAMP = struct.Struct("<q")


def _noop(_: int) -> None:
    pass


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # marks a failure as seen: the scenario already raised the first


def _abandon(futures: Iterable[asyncio.Future[Any]]) -> None:
    """Appends left in flight when a scenario fails: consume their outcomes quietly."""
    for future in futures:
        if future.done():
            _retrieve(future)
        else:
            future.add_done_callback(_retrieve)


async def ledger_append(
    client: AsyncClient,
    seconds: float,
    *,
    durability: Durability = Durability.PERSISTENT,
    window: int = LEDGER_WINDOW,
    progress: Progress = _noop,
    max_entries: int | None = None,
    on_ledger: Callable[[int], None] = _noop,
) -> Rate:
    """Pipelined 1 KiB appends to one E3/Qw3/Qa2 ledger, ``window`` in flight, for
    ``seconds`` or until ``max_entries`` were appended; ``on_ledger`` gets the ledger's id.

    Returns:
        Entries confirmed and the time from the first append to the last confirmation.
    """
    data = payload(ENTRY_BYTES)
    writer = await client.create_ledger(*ENSEMBLE, durability=durability)
    on_ledger(writer.ledger_id)
    limit = max_entries if max_entries is not None else sys.maxsize
    inflight: collections.deque[asyncio.Future[int]] = collections.deque()
    done = 0
    started = time.perf_counter()
    deadline = started + seconds
    try:
        while time.perf_counter() < deadline and done + len(inflight) < limit:
            while len(inflight) < window and done + len(inflight) < limit:
                inflight.append(writer.append_nowait(data))
            # Completion is in entry order: the oldest append finishes first.
            await inflight.popleft()
            done += 1
            if done % 256 == 0:
                progress(256)
        while inflight:
            await inflight.popleft()
            done += 1
        elapsed = time.perf_counter() - started
        progress(done % 256)
    finally:
        _abandon(inflight)
        with contextlib.suppress(WalogError):
            await writer.close()
    return Rate(ops=done, seconds=elapsed, payload_bytes=done * ENTRY_BYTES)


@dataclasses.dataclass(frozen=True)
class AppendLatency:
    """One append in flight: its latency, and the bookies' share of it by stage."""

    latency: Latency
    stages: dict[str, dict[str, float]]
    """Stage (walog/latency.py) -> ``p50_us`` and ``p99_us`` over the scenario, the
    bookies' adds pooled; empty when the bookies report none."""


async def append_latency(
    client: AsyncClient, seconds: float, progress: Progress = _noop
) -> AppendLatency:
    """One 1 KiB append in flight at a time on a PERSISTENT E3/Qw3/Qa2 ledger."""
    data = payload(ENTRY_BYTES)
    latency = Latency()
    async with await client.create_ledger(*ENSEMBLE) as writer:
        for _ in range(20):  # warm the streams to every bookie
            await writer.append(data)
        before = await stage_counts(client)
        deadline = time.perf_counter() + seconds
        while (now := time.perf_counter()) < deadline:
            await writer.append(data)
            latency.record(time.perf_counter() - now)
            progress(1)
        # The adds beyond the ack quorum may still be on their way: wait for them.
        await asyncio.sleep(0.1)
        after = await stage_counts(client)
    return AppendLatency(latency, stage_percentiles(before, after))


async def stage_counts(client: AsyncClient) -> dict[str, list[int]]:
    """The add-stage histograms of every bookie (``Info``), summed."""
    total: dict[str, list[int]] = {}
    for bookie in await client.bookies():
        connection = client.ctx.pool.get(bookie)
        if not isinstance(connection, NetworkBookieClient):
            continue
        for stage in (await connection.info()).latencies:
            counts = total.setdefault(stage.stage, [0] * len(stage.counts))
            for index, count in enumerate(stage.counts):
                counts[index] += count
    return total


def stage_percentiles(
    before: dict[str, list[int]], after: dict[str, list[int]]
) -> dict[str, dict[str, float]]:
    """p50 and p99 (us) of each stage between two :func:`stage_counts` snapshots."""
    out: dict[str, dict[str, float]] = {}
    for stage, counts in after.items():
        earlier = before.get(stage, [0] * len(counts))
        spent = [a - b for a, b in zip(counts, earlier, strict=True)]
        p50, p99 = percentile_us(spent, 50), percentile_us(spent, 99)
        if p50 is not None and p99 is not None:
            out[stage] = {"p50_us": round(p50, 1), "p99_us": round(p99, 1)}
    return out


async def log_append(
    client: AsyncClient,
    seconds: float,
    *,
    window: int = LOG_WINDOW,
    progress: Progress = _noop,
    producer: str | None = None,
) -> Rate:
    """Pipelined 100-byte records through a log writer, which batches them into entries;
    with ``producer``, in that producer's session (each record numbered by the writer)."""
    data = payload(RECORD_BYTES)
    log = await client.open_log(
        f"bench-append-{uuid.uuid4().hex[:8]}",
        ensemble_size=ENSEMBLE[0],
        write_quorum=ENSEMBLE[1],
        ack_quorum=ENSEMBLE[2],
    )
    writer = await log.open_writer(producer=producer)
    batches: collections.deque[list[asyncio.Future[Position]]] = collections.deque()
    inflight = done = 0
    started = time.perf_counter()
    deadline = started + seconds
    try:
        while True:
            if time.perf_counter() < deadline and inflight < window:
                batches.append([writer.append_nowait(data) for _ in range(LOG_BATCH)])
                inflight += LOG_BATCH
                await asyncio.sleep(0)  # let the writer seal this turn's records into entries
                continue
            if not batches:
                break
            oldest = batches.popleft()
            await oldest[-1]
            for future in oldest:  # records complete in order; surface any failure
                future.result()
            inflight -= len(oldest)
            done += len(oldest)
            progress(len(oldest))
        elapsed = time.perf_counter() - started
    finally:
        for batch in batches:
            _abandon(batch)
        with contextlib.suppress(WalogError):
            await writer.close()
    return Rate(ops=done, seconds=elapsed, payload_bytes=done * RECORD_BYTES)


def sync_ledger_append(
    metadata_uri: str,
    seconds: float,
    *,
    window: int = LEDGER_WINDOW,
    batch: int = 1,
    progress: Progress = _noop,
) -> Rate:
    """The blocking API (``walog.connect``): pipelined 1 KiB appends, ``window`` in flight,
    ``batch`` a call: ``append_async`` when 1, else ``append_many_async``.

    Must run in a thread without a running event loop (the sync client runs its own).
    """
    data = payload(ENTRY_BYTES)
    entries = [data] * batch
    with connect(metadata_uri) as client, client.create_ledger(*ENSEMBLE) as writer:
        submit: Callable[[], concurrent.futures.Future[Any]] = (
            (lambda: writer.append_async(data))
            if batch == 1
            else (lambda: writer.append_many_async(entries))
        )
        done, elapsed = _keep_in_flight(submit, -(-window // batch), batch, seconds, progress)
    return Rate(ops=done, seconds=elapsed, payload_bytes=done * ENTRY_BYTES)


def _keep_in_flight(
    submit: Callable[[], concurrent.futures.Future[Any]],
    calls: int,
    ops_per_call: int,
    seconds: float,
    progress: Progress,
) -> tuple[int, float]:
    """Keep ``calls`` results of ``submit()`` pending for ``seconds`` (each worth
    ``ops_per_call`` operations), then wait for the rest; return the operations completed
    and the seconds from the first call to the last completion. Progress is reported in
    steps of at least 256 operations (a call of the bar per entry would be measured too)."""
    inflight: collections.deque[concurrent.futures.Future[Any]] = collections.deque()
    done = unreported = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        while len(inflight) < calls:
            inflight.append(submit())
        inflight.popleft().result()
        done += ops_per_call
        unreported += ops_per_call
        if unreported >= 256:
            progress(unreported)
            unreported = 0
    while inflight:
        inflight.popleft().result()
        done += ops_per_call
        unreported += ops_per_call
    progress(unreported)
    return done, time.perf_counter() - started


def sync_log_append(
    metadata_uri: str,
    seconds: float,
    *,
    window: int = LOG_WINDOW,
    batch: int = LOG_BATCH,
    progress: Progress = _noop,
) -> Rate:
    """The blocking API: 100-byte records through a ``LogWriter``, ``window`` in flight (as
    :func:`log_append` keeps), ``batch`` a call: ``append_async`` when 1, else
    ``append_many_async``.

    Must run in a thread without a running event loop (the sync client runs its own).
    """
    data = payload(RECORD_BYTES)
    records = [data] * batch
    with connect(metadata_uri) as client:
        log = client.open_log(
            f"bench-sync-append-{uuid.uuid4().hex[:8]}",
            ensemble_size=ENSEMBLE[0],
            write_quorum=ENSEMBLE[1],
            ack_quorum=ENSEMBLE[2],
        )
        with log.open_writer() as writer:
            submit: Callable[[], concurrent.futures.Future[Any]] = (
                (lambda: writer.append_async(data))
                if batch == 1
                else (lambda: writer.append_many_async(records))
            )
            # Calls in flight: window records, rounded up.
            done, elapsed = _keep_in_flight(submit, -(-window // batch), batch, seconds, progress)
    return Rate(ops=done, seconds=elapsed, payload_bytes=done * RECORD_BYTES)


def sync_append_latency(metadata_uri: str, seconds: float, progress: Progress = _noop) -> Latency:
    """One 1 KiB ``LedgerWriter.append`` in flight at a time through the blocking API (as
    :func:`append_latency` through asyncio)."""
    data = payload(ENTRY_BYTES)
    latency = Latency()
    with connect(metadata_uri) as client, client.create_ledger(*ENSEMBLE) as writer:
        for _ in range(20):  # warm the streams to every bookie
            writer.append(data)
        deadline = time.perf_counter() + seconds
        while (now := time.perf_counter()) < deadline:
            writer.append(data)
            latency.record(time.perf_counter() - now)
            progress(1)
    return latency


@dataclasses.dataclass(frozen=True)
class TailLag:
    """Tail lag, whole and in its two parts."""

    lag: Latency
    """From the append to the record coming out of the reader."""
    acked: Latency
    """From the append to its acknowledgement (the writer's part)."""
    after_ack: Latency
    """From the acknowledgement to the record coming out of the reader (the LAC's way to
    the bookies and on to the reader)."""
    journal_syncs: list[int]
    """The bookies' journal-sync histogram (:mod:`walog.latency` buckets) over the run,
    summed: a sync the disk held up stalls every record behind it."""


async def tail_lag(
    client: AsyncClient,
    seconds: float,
    *,
    interval: float = 0.001,
    progress: Progress = _noop,
) -> TailLag:
    """Time from a log append to the same record coming out of a tailing reader.

    One 100-byte record, stamped with the monotonic clock, is appended, then the producer
    sleeps ``interval`` seconds, and so on (writer and reader share this process, so they
    share the clock). The lag covers
    the append round trip, the last-add-confirmed reaching the bookies and the reader's
    LAC watch; the acknowledgement time of each record splits it in two.
    """
    log = await client.open_log(
        f"bench-tail-{uuid.uuid4().hex[:8]}",
        ensemble_size=ENSEMBLE[0],
        write_quorum=ENSEMBLE[1],
        ack_quorum=ENSEMBLE[2],
    )
    writer = await log.open_writer()
    reader = await log.open_reader("earliest")
    latency, acked, after_ack = Latency(), Latency(), Latency()
    ack_ns: dict[int, int] = {}  # stamp -> acknowledgement time
    pad = payload(RECORD_BYTES - _STAMP.size)
    written = 0

    def on_ack(stamp: int, future: asyncio.Future[Position]) -> None:
        _retrieve(future)  # a failure surfaces in flush() below
        ack_ns[stamp] = time.perf_counter_ns()

    async def produce() -> None:
        nonlocal written
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            stamp = time.perf_counter_ns()
            future = writer.append_nowait(_STAMP.pack(stamp) + pad)
            future.add_done_callback(functools.partial(on_ack, stamp))
            written += 1
            await asyncio.sleep(interval)
        await writer.flush()

    syncs_before = (await stage_counts(client)).get("journal_sync", [])
    producer = asyncio.create_task(produce())
    seen = 0
    try:
        while not producer.done() or seen < written:
            record = await reader.read_next(timeout=5.0)
            if record is None:
                if producer.done():
                    break
                continue
            now = time.perf_counter_ns()
            (stamp,) = _STAMP.unpack_from(record.data)
            latency.record((now - stamp) / 1e9)
            ack = ack_ns.pop(stamp, None)
            if ack is not None:  # else the ack callback has not run yet: it is that late
                acked.record((ack - stamp) / 1e9)
                after_ack.record((now - ack) / 1e9)
            seen += 1
            progress(1)
        await producer
    finally:
        producer.cancel()
        await reader.close()
        await writer.close()
    syncs = (await stage_counts(client)).get("journal_sync", [])
    syncs = [a - b for a, b in itertools.zip_longest(syncs, syncs_before, fillvalue=0)]
    return TailLag(latency, acked, after_ack, syncs)


@dataclasses.dataclass(frozen=True)
class RecoveryPoint:
    """Recovery of one open ledger: how long it was and how long recovery took."""

    entries: int
    seconds: float


async def recovery_time(
    metadata_uri: str, lengths: Sequence[int], progress: Progress = _noop
) -> list[RecoveryPoint]:
    """For each length: fill an open ledger, then time ``open_ledger(recovery=True)`` from
    another client (fence, read forward from the last add confirmed, write back, CAS close).
    """
    points = []
    data = payload(ENTRY_BYTES)
    writer_client = await walog.aio.connect(metadata_uri)
    recoverer = await walog.aio.connect(metadata_uri)
    try:
        for length in lengths:
            writer = await writer_client.create_ledger(*ENSEMBLE)
            inflight: collections.deque[asyncio.Future[int]] = collections.deque()
            for _ in range(length):
                inflight.append(writer.append_nowait(data))
                if len(inflight) >= LEDGER_WINDOW:
                    await inflight.popleft()
            while inflight:
                await inflight.popleft()
            started = time.perf_counter()
            reader = await recoverer.open_ledger(writer.ledger_id, recovery=True)
            elapsed = time.perf_counter() - started
            if reader.last_add_confirmed != length - 1:
                raise WalogError(
                    f"recovery closed ledger {writer.ledger_id} at entry "
                    f"{reader.last_add_confirmed}, expected {length - 1}"
                )
            await reader.close()
            with contextlib.suppress(WalogError):  # fenced by the recovery, as intended
                await writer.close()
            points.append(RecoveryPoint(entries=length, seconds=elapsed))
            progress(1)
    finally:
        await recoverer.close()
        await writer_client.close()
    return points


async def fill_ledger(client: AsyncClient, megabytes: float) -> int:
    """Write ``megabytes`` of 1 KiB entries to a closed E3/Qw3/Qa2 ledger; return bytes."""
    data = payload(ENTRY_BYTES)
    count = max(1, int(megabytes * 1e6) // ENTRY_BYTES)
    async with await client.create_ledger(*ENSEMBLE) as writer:
        inflight: collections.deque[asyncio.Future[int]] = collections.deque()
        for _ in range(count):
            inflight.append(writer.append_nowait(data))
            if len(inflight) >= LEDGER_WINDOW:
                await inflight.popleft()
        while inflight:
            await inflight.popleft()
    return count * ENTRY_BYTES

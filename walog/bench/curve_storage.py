"""What the bookies' storage costs as it fills: memory and index against stored ledgers and
entries (``curve-index``), and GC and compaction time against stored data (``curve-gc``);
catch-up reads are in :mod:`walog.bench.curve_catchup`.

Each starts a 3-bookie :class:`walog.testing.LocalCluster` of its own (bookie flags of its
own, nothing stored before), every ledger E3/Qw3/Qa2 PERSISTENT.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import walog._loop
import walog.aio
from walog.bench.curves import Curve
from walog.bench.scenarios import ENSEMBLE, LEDGER_WINDOW, Progress
from walog.bench.stats import payload
from walog.ledger.writer import AsyncLedgerWriter
from walog.testing import LocalCluster

T = TypeVar("T")

MIB = 1 << 20
QUIET_S = 3.0
"""Seconds with nothing written before memory is read (the 1 s checkpoints empty the
write caches meanwhile)."""


def _noop(_: int) -> None:
    pass


def _status_kib(pid: int) -> dict[str, int]:
    """``VmRSS``, ``RssAnon`` and ``RssFile`` of a process, in KiB."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            found[key] = int(value.split()[0])
    return found


def _bookie_rss_mib(cluster: LocalCluster) -> list[float]:
    return [_status_kib(cluster.pid(i) or 0)["VmRSS"] / 1024 for i in range(3)]


def _index_mb(cluster: LocalCluster) -> float:
    """The largest bookie's LMDB index files (``*.mdb``), in MB allocated on disk."""
    sizes = []
    for i in range(3):
        files = Path(cluster.bookie_dir(i)).rglob("*.mdb")
        sizes.append(sum(f.stat().st_blocks * 512 for f in files))
    return max(sizes) / 1e6


def _self_rss_mib() -> float:
    return _status_kib(os.getpid())["VmRSS"] / 1024


async def _fill(writer: AsyncLedgerWriter, count: int, data: bytes, progress: Progress) -> None:
    inflight: collections.deque[asyncio.Future[int]] = collections.deque()
    for done in range(count):
        inflight.append(writer.append_nowait(data))
        if len(inflight) >= LEDGER_WINDOW:
            await inflight.popleft()
        if done % 65536 == 65535:
            progress(65536)
    while inflight:
        await inflight.popleft()


def index_and_memory(
    data_dir: Path,
    ledger_points: Sequence[int],
    entry_points: Sequence[int],
    progress: Progress = _noop,
) -> tuple[Curve, Curve]:
    """``curve-index``: bookie memory and index size against stored ledgers (each with one
    100-byte entry, left open and idle) and against the entries of one ledger (100 bytes
    each); the client's and the bookies' memory per idle open ledger."""
    ledgers = Curve(
        name="curve-index",
        title="Bookie memory and index against stored ledgers (open, idle, one entry each)",
        columns=[
            "ledgers",
            "bookie RSS MiB (largest)",
            "index MB (largest)",
            "client RSS MiB",
            "bookie KiB per ledger",
            "client KiB per open ledger",
        ],
        plot=[
            ("bookie RSS MiB (largest)", "MiB or MB"),
            ("index MB (largest)", "MiB or MB"),
            ("client RSS MiB", "MiB or MB"),
        ],
    )
    entries = Curve(
        name="curve-index:entries",
        title="Bookie memory and index against stored entries (one ledger, 100 B entries)",
        columns=["entries", "bookie RSS MiB (largest)", "index MB (largest)", "index B per entry"],
        plot=[("bookie RSS MiB (largest)", "MiB or MB"), ("index MB (largest)", "MiB or MB")],
    )
    args = ["--checkpoint-interval-s", "1"]
    data = payload(100)
    with LocalCluster(3, data_dir=data_dir / "index", bookie_args=args) as cluster:

        async def body(client: walog.aio.AsyncClient) -> None:
            await asyncio.sleep(QUIET_S)
            base_bookie, base_client = max(_bookie_rss_mib(cluster)), _self_rss_mib()
            ledgers.rows.append([0, round(base_bookie, 1), round(_index_mb(cluster), 2),
                                 round(base_client, 1), None, None])  # fmt: skip
            writers: list[AsyncLedgerWriter] = []

            async def one() -> AsyncLedgerWriter:
                writer = await client.create_ledger(*ENSEMBLE)
                await writer.append(data)
                return writer

            for point in ledger_points:
                while len(writers) < point:
                    batch = min(64, point - len(writers))
                    writers += await asyncio.gather(*(one() for _ in range(batch)))
                    progress(batch)
                await asyncio.sleep(QUIET_S)
                bookie, own = max(_bookie_rss_mib(cluster)), _self_rss_mib()
                ledgers.rows.append(
                    [
                        point,
                        round(bookie, 1),
                        round(_index_mb(cluster), 2),
                        round(own, 1),
                        round((bookie - base_bookie) * 1024 / point, 2),
                        round((own - base_client) * 1024 / point, 2),
                    ]
                )
            for start in range(0, len(writers), 256):
                await asyncio.gather(*(w.close() for w in writers[start : start + 256]))
            writer = await client.create_ledger(*ENSEMBLE)
            written, before = 0, _index_mb(cluster)
            for point in entry_points:
                await _fill(writer, point - written, data, progress)
                written = point
                await asyncio.sleep(QUIET_S)
                index = _index_mb(cluster)
                entries.rows.append(
                    [point, round(max(_bookie_rss_mib(cluster)), 1), round(index, 2),
                     round((index - before) * 1e6 / point, 1)]
                )  # fmt: skip
            await writer.close()

        walog._loop.run(with_client(cluster.metadata_uri, body))
    ledgers.notes.append(
        "A fresh cluster, bookies with `--checkpoint-interval-s 1`. One client creates "
        "ledgers (E3/Qw3/Qa2), appends one 100-byte entry to each and leaves them open and "
        "idle. Memory (`VmRSS`) is read after 3 s with nothing written (the write caches "
        "checkpointed); the index is the largest bookie's LMDB files (`*.mdb`, blocks "
        "allocated). Per ledger: the growth since the empty start over the ledgers stored, "
        "for the largest bookie and for the client holding the open writers."
    )
    entries.notes.append(
        "The same cluster after the ledgers above were closed: one more ledger gets 100-byte "
        "entries, pipelined, up to each point; memory and index read after 3 s idle. Bytes "
        "per entry: the index's growth since this ledger began, over its entries."
    )
    ledgers.bound = entries.bound = "none set (sizes are reported)."
    return ledgers, entries


async def with_client(uri: str, body: Callable[[walog.aio.AsyncClient], Awaitable[T]]) -> T:
    client = await walog.aio.connect(uri)
    try:
        return await body(client)
    finally:
        await client.close()


def _log_times(cluster: LocalCluster, index: int, event: str) -> list[dict[str, object]]:
    """The bookie's log lines of ``event`` (JSON lines), parsed."""
    found = []
    for line in cluster.log_path(index).read_text().splitlines():
        if event in line:
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def _parse_ts(text: object) -> float:
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


GC_ARGS = [
    "--entry-log-file-bytes", str(4 * MIB), "--checkpoint-interval-s", "1",
    "--gc-interval-s", "0.5", "--gc-grace-s", "0",
    "--minor-compaction-interval-s", "1", "--minor-compaction-threshold", "0.5",
    "--compaction-rate-bytes", str(1 << 40),
]  # fmt: skip
"""Bookie flags of ``curve-gc``: 4 MiB entry logs (the log being filled is never
compacted), GC every 0.5 s without grace, minor
compaction every second of logs below half live, at no rate limit."""


def gc_and_compaction(
    data_dir: Path, sizes_mb: Sequence[float], progress: Progress = _noop
) -> Curve:
    """``curve-gc``: for each size, a fresh cluster stores that many MB (4 KiB entries,
    20 ledgers written interleaved), three ledgers in four are deleted, and the bookies'
    GC (deleted -> the bookie's log line, so up to its 0.5 s interval included) and
    minor compaction (the slowest pass's own ``seconds``) are timed."""
    curve = Curve(
        name="curve-gc",
        title="GC and compaction time against stored data",
        columns=["MB stored per bookie", "GC s", "compaction s", "MB moved", "s per GB stored"],
        plot=[("GC s", "seconds"), ("compaction s", "seconds")],
    )
    data = payload(4096)
    for size in sizes_mb:
        per_ledger = int(size * 1e6) // len(data) // 20
        directory = data_dir / f"gc-{size:g}"
        with LocalCluster(3, data_dir=directory, bookie_args=GC_ARGS) as cluster:

            async def body(client: walog.aio.AsyncClient, rounds: int = per_ledger) -> list[int]:
                writers = [await client.create_ledger(*ENSEMBLE) for _ in range(20)]
                inflight: collections.deque[asyncio.Future[int]] = collections.deque()
                for _ in range(rounds):
                    for writer in writers:
                        inflight.append(writer.append_nowait(data))
                    while len(inflight) >= LEDGER_WINDOW:
                        await inflight.popleft()
                while inflight:
                    await inflight.popleft()
                for writer in writers:
                    await writer.close()
                return [w.ledger_id for w in writers]

            ids = walog._loop.run(with_client(cluster.metadata_uri, body))
            time.sleep(3.0)  # checkpointed (1 s interval)
            deleted_at = time.time()
            walog._loop.run(_delete(cluster.metadata_uri, [i for i in ids if i % 4]))
            gc_s, compaction_s, moved = _wait_gc(cluster, deleted_at)
            progress(1)
        stored = size
        curve.rows.append(
            [size, round(gc_s, 2), round(compaction_s, 2), round(moved / 1e6, 1),
             round((gc_s + compaction_s) / (stored / 1000), 2)]
        )  # fmt: skip
    curve.notes.append(
        "For each size a fresh cluster (bookie flags: "
        f"`{' '.join(GC_ARGS)}`) stores that many MB per bookie as 4 KiB entries of 20 "
        "ledgers written interleaved; once checkpointed, three ledgers in four are deleted "
        "from the metadata. GC: from the deletion to the slowest bookie's log line "
        "`deleted ledgers absent from metadata`, so up to one GC interval (0.5 s) of "
        "waiting is included. Compaction: the slowest minor compaction pass, its own "
        "`seconds`, and the bytes all passes copied; a bookie whose entry logs were left "
        "wholly dead by the deletion has nothing to compact (GC deletes those logs)."
    )
    per_gb = [float(row[4] or 0) for row in curve.rows]
    curve.bound = (
        "linear or better: the time per GB stored does not grow with the data "
        "(within 50 % of the smallest size's, for the noise of a shared machine)."
    )
    curve.holds = max(per_gb[1:], default=0.0) <= 1.5 * per_gb[0]
    return curve


async def _delete(uri: str, ids: Sequence[int]) -> None:
    client = await walog.aio.connect(uri)
    try:
        for ledger_id in ids:
            await client.delete_ledger(ledger_id)
    finally:
        await client.close()


def _wait_gc(cluster: LocalCluster, deleted_at: float) -> tuple[float, float, int]:
    """Wait for every bookie's GC line, then until compaction is done (minor compaction
    runs every second); return the slowest GC (from ``deleted_at``), the
    slowest compaction pass that moved something (0 when none) and the bytes moved."""
    deadline = time.monotonic() + 600
    while True:
        gc = [_log_times(cluster, i, "deleted ledgers absent from metadata") for i in range(3)]
        if all(gc):
            break
        if time.monotonic() > deadline:
            raise TimeoutError("no GC within 600 s of deleting the ledgers")
        time.sleep(0.5)
    gc_s = max(_parse_ts(lines[0]["timestamp"]) - deleted_at for lines in gc)
    # A compaction pass logs at its end, after deleting the logs it emptied: wait until
    # no bookie deleted or compacted anything for COMPACTION_WAIT_S.
    seen = -1
    while time.monotonic() < deadline:
        now = sum(
            len(_log_times(cluster, i, event))
            for i in range(3)
            for event in ("entry log deleted", "entry logs compacted")
        )
        if now == seen:
            break
        seen = now
        time.sleep(COMPACTION_WAIT_S)
    passes = [
        c for i in range(3) for c in _log_times(cluster, i, "entry logs compacted") if c.get("logs")
    ]
    seconds = max((float(str(c["seconds"])) for c in passes), default=0.0)
    return gc_s, seconds, sum(int(str(c["moved_bytes"])) for c in passes)


COMPACTION_WAIT_S = 5.0
"""Seconds without an entry log deleted or compacted after which compaction is done (every
bookie's minor pass runs each second)."""


__all__ = ["GC_ARGS", "gc_and_compaction", "index_and_memory", "with_client"]

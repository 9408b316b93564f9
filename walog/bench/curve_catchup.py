"""Catch-up reads of a closed log, cold and warm (``walog bench --only curve-catchup``).

It starts a 3-bookie :class:`walog.testing.LocalCluster` of its own (1 s checkpoints,
nothing stored before).
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
import uuid
from pathlib import Path

import walog._loop
import walog.aio
from walog.bench.checkpoint_tail import checkpointed_entries
from walog.bench.curve_storage import with_client
from walog.bench.curves import Curve
from walog.bench.scenarios import Progress
from walog.bench.stats import payload
from walog.testing import LocalCluster


def _noop(_: int) -> None:
    pass


def _drop_caches() -> bool:
    """Write back and drop the page cache (root only); False when not allowed."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def catch_up(data_dir: Path, total_mb: float, progress: Progress = _noop) -> Curve:
    """``curve-catchup``: a log of ``total_mb`` MB (4 KiB records) is written and closed,
    the bookies restarted and the page cache dropped, then read from its start by a log
    reader (cold), and read again (warm); MB/s from the start to each eighth of the log."""
    curve = Curve(
        name="curve-catchup",
        title="Catch-up read of a closed log, cold and warm",
        columns=["MB read", "cold MB/s so far", "warm MB/s so far"],
        plot=[("cold MB/s so far", "MB/s"), ("warm MB/s so far", "MB/s")],
        log_x=False,
    )
    record = payload(4096)
    count = int(total_mb * 1e6) // len(record)
    name = f"bench-catchup-{uuid.uuid4().hex[:8]}"
    args = ["--checkpoint-interval-s", "1"]
    with LocalCluster(3, data_dir=data_dir / "catchup", bookie_args=args, metrics=True) as cluster:

        async def write(client: walog.aio.AsyncClient) -> None:
            log = await client.open_log(name)
            async with await log.open_writer() as writer:
                pending: collections.deque[asyncio.Future[object]] = collections.deque()
                for i in range(count):
                    pending.append(writer.append_nowait(record))  # type: ignore[arg-type]
                    if len(pending) >= 8192:
                        await pending.popleft()
                    if i % 4096 == 4095:
                        progress(1)
                        await asyncio.sleep(0)
                while pending:
                    await pending.popleft()

        walog._loop.run(with_client(cluster.metadata_uri, write))
        _wait_checkpointed(cluster)
        slices: dict[str, list[float]] = {}
        for label in ("cold", "warm"):
            if label == "cold":
                for i in range(3):
                    cluster.stop(i)
                    cluster.restart(i)
                dropped = _drop_caches()
            slices[label] = _read_all(cluster.metadata_uri, name, count, progress)
    step = total_mb / 8
    for index in range(8):
        curve.rows.append(
            [round(step * (index + 1)), round(slices["cold"][index], 1),
             round(slices["warm"][index], 1)]
        )  # fmt: skip
    whole = {label: rates[-1] for label, rates in slices.items()}
    curve.bound = (
        f"none set. Whole log: {whole['cold']:.0f} MB/s cold, {whole['warm']:.0f} MB/s warm."
    )
    curve.notes.append(
        f"A log of {total_mb:,.0f} MB (4 KiB records, E3/Qw3/Qa2) is written and closed, "
        "and the bookies (`--checkpoint-interval-s 1`) checkpoint it. Cold: the three "
        "bookies are restarted and the page cache dropped (`sync; echo 3 > "
        "/proc/sys/vm/drop_caches`), then one log reader reads the log from its start. "
        "Warm: the same read again. The rate is from the start of the read to the end of "
        "each eighth of the log."
    )
    if not dropped:
        curve.notes.append("The page cache could not be dropped (not root): cold is not cold.")
    return curve


def _wait_checkpointed(cluster: LocalCluster) -> None:
    """Wait until no bookie checkpointed anything for two seconds."""
    last = checkpointed_entries(cluster)
    while True:
        time.sleep(2.0)
        now = checkpointed_entries(cluster)
        if now == last:
            return
        last = now


def _read_all(uri: str, name: str, count: int, progress: Progress) -> list[float]:
    """Read the log's ``count`` records from its start; MB/s from the start to the end of
    each eighth (the reader fetches ahead, so shorter slices would time its batches)."""

    async def body(client: walog.aio.AsyncClient) -> list[float]:
        log = await client.open_log(name)
        reader = await log.open_reader("earliest")
        marks = [count * (i + 1) // 8 for i in range(8)]
        rates: list[float] = []
        seen = size = 0
        started = time.perf_counter()
        try:
            while seen < count:
                for record in await reader.read_available(timeout=60.0):
                    seen += 1
                    size += len(record.data)
                    if marks and seen >= marks[0]:
                        rates.append(size / 1e6 / (time.perf_counter() - started))
                        marks.pop(0)
                        progress(1)
        finally:
            await reader.close()
        return rates

    return walog._loop.run(with_client(uri, body))


__all__ = ["catch_up"]

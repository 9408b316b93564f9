"""Duelling writer processes: takeovers fence, nothing acknowledged is lost or duplicated."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import walog.aio
from tests.processes import DIE_WITH_PARENT
from walog.testing import LocalCluster

REPO_ROOT = Path(__file__).resolve().parents[2]

# One writer process: take over, append pipelined batches until fenced or the turn ends,
# take over again; print every acknowledged record (and every fencing) as a JSON line.
WORKER = r"""
import asyncio, json, random, sys, time
import walog.aio
from walog.errors import WriterFencedError

async def main(uri, name, wid, seconds):
    rng = random.Random(wid)
    async with await walog.aio.connect(uri) as client:
        log = await client.open_log(name)
        seq = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            writer = await log.open_writer()
            print(json.dumps({"event": "takeover", "ledger": writer.ledger_id}), flush=True)
            try:
                for _ in range(rng.randint(3, 12)):
                    batch = []
                    for _ in range(rng.randint(1, 8)):
                        data = f"{wid}:{seq}"
                        seq += 1
                        batch.append((data, writer.append_nowait(data.encode())))
                    for data, fut in batch:
                        pos = await fut
                        print(json.dumps({"event": "ack", "pos": str(pos), "data": data}),
                              flush=True)
            except WriterFencedError:
                print(json.dumps({"event": "fenced"}), flush=True)
            finally:
                await writer.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
"""


async def read_everything(uri: str, name: str) -> list[tuple[str, str]]:
    async with await walog.aio.connect(uri) as client:
        log = await client.open_log(name)
        final = await log.open_writer()  # fences the last writer: every ledger has an end
        reader = await log.open_reader("earliest")
        out = []
        while (record := await reader.read_next(timeout=2.0)) is not None:
            out.append((str(record.position), record.data.decode()))
        await reader.close()
        await final.close()
        return out


def test_duelling_writer_processes_lose_and_duplicate_nothing_acknowledged(
    cluster: LocalCluster, log_name: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    workers = [
        subprocess.Popen(
            [
                *DIE_WITH_PARENT,
                sys.executable,
                "-c",
                WORKER,
                cluster.metadata_uri,
                log_name,
                str(w),
                "6",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        for w in range(3)
    ]
    events = []
    for proc in workers:
        out, _ = proc.communicate(timeout=110)
        assert proc.returncode == 0, f"worker exited with {proc.returncode}"
        events.extend(json.loads(line) for line in out.splitlines() if line.startswith("{"))
    acked = {e["data"]: e["pos"] for e in events if e["event"] == "ack"}
    fencings = sum(1 for e in events if e["event"] == "fenced")
    assert acked, "no worker got any record acknowledged"
    assert fencings > 0, "the writers never fenced each other; the test proves nothing"

    log = asyncio.run(read_everything(cluster.metadata_uri, log_name))
    datas = [d for _, d in log]
    assert len(datas) == len(set(datas)), "a record appears twice"
    found = dict((d, p) for p, d in log)
    missing = sorted(set(acked) - set(found))
    assert not missing, f"acknowledged records lost: {missing[:10]}"
    assert all(found[d] == p for d, p in acked.items()), "a record moved from its position"
    for wid in range(3):
        seqs = [int(d.split(":")[1]) for d in datas if d.startswith(f"{wid}:")]
        assert seqs == sorted(seqs), f"writer {wid}'s records are out of order"

"""A chaos writer process: takes the log over in turns and records every acknowledgement.

``python -m tests.chaos.worker URI LOG WRITER INCARNATION OUT_DIR SEED`` runs until it is
killed. Each turn it takes the log over (``open_writer()``, fencing whoever wrote before),
appends pipelined batches for a random while, closes, pauses, and takes over again. A turn
also ends when another writer fences it (``WriterFencedError``) or the library gives up
(any other :class:`walog.WalogError`, logged, then the next turn).

Files in ``OUT_DIR`` (all append-only, fsynced; see :mod:`tests.chaos.records`):

- ``acks-W.jsonl``: ``{"sent": [INC, SEQ]}`` before a batch goes out (the highest sequence
  number that batch may put in the log) and ``{"key": KEY, "pos": POSITION}`` per
  acknowledged record once its batch is acknowledged.
- ``session-W.json``: the ZooKeeper session id and password of the current metadata session,
  rewritten at every turn, so the nemesis can expire that session.
- ``events-W.log`` (stdout/stderr, written by the harness): takeovers, fencings, errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import walog.aio
from tests.chaos.records import JsonLines, RecordKey, payload
from walog import mutations
from walog.config import ClientConfig, Timeouts
from walog.errors import WalogError, WriterFencedError
from walog.log.async_log import AsyncLog
from walog.log.position import Position
from walog.log.retention import RollPolicy
from walog.wire.durability import Durability

MUTATIONS_ENV = "WALOG_CHAOS_MUTATIONS"
"""Comma-separated test-only protocol mutations to switch on in this writer process."""

# Short client time limits: a paused bookie is replaced within seconds, not tens of them.
CHAOS_CLIENT = ClientConfig(timeouts=Timeouts(add=2.0, read=2.0, metadata=5.0))
CHAOS_ROLL = RollPolicy(max_entries=40)
"""The chaos log's roll policy, stored when the harness creates the log."""


def _emit(event: str, **fields: Any) -> None:
    # One write with its newline: print() writes the newline separately when output is
    # unbuffered, and a library's log line on the same file could land between the two.
    line = json.dumps({"t": round(time.time(), 3), "event": event, **fields}) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()


def write_session_file(client: walog.aio.AsyncClient, path: Path) -> None:
    """Record the client's ZooKeeper session id and password (hex) for the nemesis."""
    kazoo = getattr(client.ctx.store, "_client", None)
    client_id = getattr(kazoo, "client_id", None)
    if client_id is None:
        return
    session_id, password = client_id
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"session_id": int(session_id), "password": password.hex()}))
    os.replace(tmp, path)


class ChaosWriter:
    """One writer incarnation's state: its next sequence number and its ack file."""

    def __init__(self, writer: int, incarnation: int, out_dir: Path, seed: int) -> None:
        self.writer = writer
        self.incarnation = incarnation
        self.rng = random.Random(f"{seed}:{writer}:{incarnation}")
        self.next_seq = 0
        self.acks = JsonLines(out_dir / f"acks-{writer}.jsonl")
        self.session_path = out_dir / f"session-{writer}.json"

    def keys(self, count: int) -> list[RecordKey]:
        """The next ``count`` record keys (recorded as sent before they are handed out)."""
        keys = [RecordKey(self.writer, self.incarnation, self.next_seq + i) for i in range(count)]
        self.next_seq += count
        self.acks.write([{"sent": [self.incarnation, keys[-1].seq]}])
        return keys

    async def turn(self, log: AsyncLog) -> None:
        """Take over, append for a random while, close."""
        writer = await log.open_writer()
        _emit("takeover", ledger=writer.ledger_id)
        end = time.monotonic() + self.rng.uniform(0.5, 4.0)
        try:
            while time.monotonic() < end:
                keys = self.keys(self.rng.randint(1, 24))
                futures = [writer.append_nowait(payload(key)) for key in keys]
                rows: list[dict[str, object]] = []
                try:
                    for key, future in zip(keys, futures, strict=True):
                        position: Position = await future
                        rows.append({"key": str(key), "pos": str(position)})
                finally:
                    self.acks.write(rows)  # acknowledged ones, even when a later one failed
        except WriterFencedError:
            _emit("fenced", ledger=writer.ledger_id)
        except WalogError as exc:
            _emit("append_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(WalogError):
                await writer.close()


async def run(
    uri: str,
    log_name: str,
    state: ChaosWriter,
    quorum: tuple[int, int, int],
    durability: Durability = Durability.PERSISTENT,
) -> None:
    """Turn after turn until killed; ``quorum`` is (ensemble, write, ack) of new ledgers."""
    ensemble, write, ack = quorum
    async with await walog.aio.connect(uri, timeout=10.0, config=CHAOS_CLIENT) as client:
        log = await client.open_log(
            log_name,
            ensemble_size=ensemble,
            write_quorum=write,
            ack_quorum=ack,
            roll_policy=CHAOS_ROLL,
            durability=durability,
        )
        _emit("started", writer=state.writer, incarnation=state.incarnation)
        while True:
            write_session_file(client, state.session_path)
            try:
                await state.turn(log)
            except WalogError as exc:
                _emit("takeover_failed", error=f"{type(exc).__name__}: {exc}")
            # Leave the log to the others for a moment: writers take over in turns.
            await asyncio.sleep(state.rng.uniform(0.1, 1.5))


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the writer."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.worker")
    parser.add_argument("uri")
    parser.add_argument("log")
    parser.add_argument("writer", type=int)
    parser.add_argument("incarnation", type=int)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("seed", type=int)
    parser.add_argument("--quorum", default="3,3,2", help="E,Qw,Qa of new ledgers")
    parser.add_argument("--durability", default="PERSISTENT", choices=[d.name for d in Durability])
    args = parser.parse_args(argv)
    ensemble, write, ack = (int(part) for part in args.quorum.split(","))
    planted = [name for name in os.environ.get(MUTATIONS_ENV, "").split(",") if name]
    if planted:
        mutations.set_enabled(planted)
        _emit("mutations", names=planted)
    state = ChaosWriter(args.writer, args.incarnation, args.out_dir, args.seed)
    quorum = (ensemble, write, ack)
    asyncio.run(run(args.uri, args.log, state, quorum, Durability[args.durability]))


if __name__ == "__main__":
    main()

"""A writer on a client host: appends pipelined to one log until told to stop.

``python -m tests.hosts.writer URI LOG OUT_DIR INCARNATION`` takes the log over once and
keeps up to ``--window`` appends in flight, recording them like the chaos writers do
(``OUT_DIR/acks-W.jsonl`` for ``--writer W``, 0 by default: ``{"epoch": [INC, EPOCH]}``
once the takeover made the log's epoch ``EPOCH``, ``{"sent": ...}`` before a batch goes
out, ``{"key", "pos"}`` per acknowledged record, fsynced; :mod:`tests.chaos.records`). It
prints one JSON event line per takeover, fencing or failure.

Exit status: 0 after SIGTERM (appends in flight are awaited, the writer closed), 0 when
another writer fenced it (``fenced`` event), 4 when the library gave up with any other
error, the takeover's included (``failed`` event, naming it).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import signal
import time
from pathlib import Path

import walog.aio
from tests.chaos.records import payload
from tests.chaos.worker import CHAOS_CLIENT, ChaosWriter, _emit
from walog.errors import WalogError, WriterFencedError
from walog.log.position import Position
from walog.log.retention import RollPolicy

BATCH = 16


class Pace:
    """At most ``per_second`` batches a second (a token bucket one batch deep)."""

    def __init__(self, per_second: float) -> None:
        self._interval = 1.0 / per_second
        self._next = time.monotonic()

    def ready(self) -> bool:
        """True (and the batch counted) when the next batch may go now."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = max(self._next + self._interval, now - self._interval)
        return True

    def wait_s(self) -> float:
        """Seconds until the next batch may go."""
        return max(0.0, self._next - time.monotonic())


async def run(args: argparse.Namespace) -> int:
    """Take over and append until SIGTERM; the exit status."""
    ensemble, write, ack = (int(part) for part in args.quorum.split(","))
    state = ChaosWriter(args.writer, args.incarnation, args.out_dir, seed=args.incarnation)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        client = await walog.aio.connect(args.uri, config=CHAOS_CLIENT)
    except WalogError as exc:
        _emit("failed", error=f"{type(exc).__name__}: {exc}")
        return 4
    async with client:
        pending: collections.deque[tuple[str, asyncio.Future[Position]]] = collections.deque()
        try:
            log = await client.open_log(
                args.log,
                ensemble_size=ensemble,
                write_quorum=write,
                ack_quorum=ack,
                roll_policy=RollPolicy(max_entries=args.roll_entries),
            )
            writer = await log.open_writer()
            state.acks.write([{"epoch": [args.incarnation, writer.epoch]}])
            _emit("takeover", ledger=writer.ledger_id, epoch=writer.epoch)
            pace = Pace(args.rate / BATCH)
            while not stop.is_set() or pending:
                while not stop.is_set() and len(pending) < args.window and pace.ready():
                    for record_key in state.keys(BATCH):
                        pending.append((str(record_key), writer.append_nowait(payload(record_key))))
                if not pending:
                    await asyncio.sleep(pace.wait_s())
                    continue
                key, future = pending[0]
                position = await future
                rows: list[dict[str, object]] = [{"key": key, "pos": str(position)}]
                pending.popleft()
                while pending and pending[0][1].done():
                    key, future = pending.popleft()
                    rows.append({"key": key, "pos": str(future.result())})
                state.acks.write(rows)
            await writer.close()
        except WriterFencedError as exc:
            _emit("fenced", error=str(exc))
            return 0
        except WalogError as exc:
            _emit("failed", error=f"{type(exc).__name__}: {exc}")
            return 4
        finally:
            for _, future in pending:
                future.cancel()
    _emit("stopped")
    return 0


def main() -> int:
    """Parse the command line and write."""
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.writer")
    parser.add_argument("uri")
    parser.add_argument("log")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("incarnation", type=int)
    parser.add_argument("--writer", type=int, default=0, help="the writer's number (keys, files)")
    parser.add_argument("--window", type=int, default=64, help="appends in flight at most")
    parser.add_argument("--rate", type=float, default=800.0, help="records a second at most")
    parser.add_argument("--quorum", default="3,3,2", help="E,Qw,Qa of new ledgers")
    parser.add_argument("--roll-entries", type=int, default=400, help="entries per ledger")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())

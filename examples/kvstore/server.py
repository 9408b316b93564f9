"""A small replicated key-value service built on ``walog.recipes.AsyncStateMachine``.

Run several nodes on one log; one leads, the others are warm standbys::

    python examples/kvstore/server.py --metadata URI --log kv --listen 127.0.0.1:7001 --node a
    python examples/kvstore/server.py --metadata URI --log kv --listen 127.0.0.1:7002 --node b

The recipe does the replication: standbys tail the log and apply it, the elected node
fences the previous leader, catches up and only then serves, snapshots are taken every
``--snapshot-every`` records and the log is truncated behind them. This file is only the
service: how a record changes the map, how the map is saved and restored, and the wire.

Line protocol (UTF-8, one request per line, keys and values without spaces):

    PUT key value  ->  OK <position>      (leader only; ERR otherwise)
    DEL key        ->  OK <position>      (leader only)
    GET key        ->  VALUE value | NONE  (any node; a standby may lag a little)
    LGET key       ->  VALUE value | NONE  (any node, linearizable: every PUT answered
                                            before the request is seen)
    ROLE           ->  LEADER | STANDBY    (STANDBY also while catching up)
    DIGEST         ->  <sha256 of the map> <applied position>

On stdout each node prints one JSON line per change of role (``standby``, ``leader``,
``stepped-down``) for scripts that drive it. ``--history FILE`` appends one line per
applied record (``position`` and the record), ``started`` when the process starts and
``restored <position>`` after a restore.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import sys
from typing import IO, TextIO

import structlog

import walog.aio
from walog.log.position import Position, Record
from walog.log.retention import RollPolicy
from walog.recipes import AsyncStateMachine, NotLeaderError, Role, SnapshotPolicy


def announce(event: str, **fields: object) -> None:
    """One JSON line on stdout about a change of state."""
    print(json.dumps({"event": event, **fields}), flush=True)


class KVService:
    """The replicated state: a map, changed only by log records (JSON operations)."""

    def __init__(self, history: TextIO | None) -> None:
        self.data: dict[str, str] = {}
        self.history = history

    def apply(self, record: Record) -> Position:
        op = json.loads(record.data)
        if op["op"] == "put":
            self.data[op["k"]] = op["v"]
        elif op["op"] == "del":
            self.data.pop(op["k"], None)
        if self.history is not None:
            self.history.write(f"{record.position} {record.data.decode()}\n")
            self.history.flush()
        return record.position

    def snapshot(self) -> bytes:
        return json.dumps(self.data, sort_keys=True).encode()

    def restore(self, data: IO[bytes], position: Position) -> None:
        self.data = json.loads(data.read())
        if self.history is not None:
            self.history.write(f"restored {position}\n")
            self.history.flush()

    def digest(self) -> str:
        return hashlib.sha256(self.snapshot()).hexdigest()


class KVServer:
    """The line protocol over one node of the state machine."""

    def __init__(self, machine: AsyncStateMachine, service: KVService) -> None:
        self.machine = machine
        self.service = service

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection."""
        try:
            while line := await reader.readline():
                writer.write((await self.answer(line.decode().split())).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def answer(self, words: list[str]) -> str:
        """The reply to one request."""
        match words:
            case ["ROLE"]:
                return "LEADER" if self.machine.role is Role.LEADER else "STANDBY"
            case ["GET", key]:
                value = self.service.data.get(key)
                return "NONE" if value is None else f"VALUE {value}"
            case ["LGET", key]:
                return await self.linearizable_get(key)
            case ["DIGEST"]:
                return f"{self.service.digest()} {self.machine.applied_position}"
            case ["PUT", key, value]:
                return await self.write({"op": "put", "k": key, "v": value})
            case ["DEL", key]:
                return await self.write({"op": "del", "k": key})
        return "ERR bad request"

    async def linearizable_get(self, key: str) -> str:
        """GET once this node applied every command answered before the request."""
        try:
            value = await self.machine.read(lambda service: service.data.get(key))
        except (walog.WalogError, TimeoutError) as exc:
            return f"ERR {type(exc).__name__}: {exc}"
        return "NONE" if value is None else f"VALUE {value}"

    async def write(self, op: dict[str, str]) -> str:
        try:
            return f"OK {await self.machine.submit(json.dumps(op).encode())}"
        except NotLeaderError:
            return "ERR not the leader"
        except walog.WalogError as exc:
            return f"ERR {type(exc).__name__}: the write may or may not be applied"


async def report_roles(machine: AsyncStateMachine, node: str) -> None:
    """Announce every change of role on stdout."""
    shown = machine.role

    def changed() -> bool:
        return machine.role is not shown

    while True:
        await machine.wait_for(changed)
        if machine.role is Role.LEADER:
            announce("leader", node=node, epoch=machine.epoch)
        elif shown is Role.LEADER:
            announce("stepped-down", node=node)
        shown = machine.role


async def main(args: argparse.Namespace, service: KVService) -> int:
    host, port = args.listen.rsplit(":", 1)
    policy = SnapshotPolicy(every_records=args.snapshot_every) if args.snapshot_every else None
    async with await walog.aio.connect(args.metadata) as client:
        log = await client.open_log(args.log, roll_policy=RollPolicy(max_entries=args.roll_every))
        machine = AsyncStateMachine(log, service, node_id=args.node, snapshot_policy=policy)
        async with machine:
            server = await asyncio.start_server(KVServer(machine, service).handle, host, int(port))
            announce("standby", node=args.node, listen=args.listen)
            async with server:
                await report_roles(machine, args.node)
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", required=True, help="walog metadata URI")
    parser.add_argument("--log", default="kv", help="log name (default kv)")
    parser.add_argument("--listen", required=True, help="HOST:PORT to serve on")
    parser.add_argument("--node", required=True, help="this node's id (for the election)")
    parser.add_argument("--snapshot-every", type=int, default=0, help="records per snapshot")
    parser.add_argument("--roll-every", type=int, default=1000, help="entries per ledger")
    parser.add_argument("--history", help="append every applied record to this file")
    return parser.parse_args(argv)


if __name__ == "__main__":
    # Library log lines go to stderr; stdout carries only the JSON state events.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    flags = parse()
    history = open(flags.history, "a") if flags.history else None  # noqa: SIM115
    if history is not None:
        history.write("started\n")  # a new process: its state starts empty
        history.flush()
    sys.exit(asyncio.run(main(flags, KVService(history))))

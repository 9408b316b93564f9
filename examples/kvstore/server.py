"""A small replicated key-value service that uses a walog log as its write-ahead log.

Run several nodes on one log; one leads, the others are warm standbys::

    python examples/kvstore/server.py --metadata URI --log kv --listen 127.0.0.1:7001 --node a
    python examples/kvstore/server.py --metadata URI --log kv --listen 127.0.0.1:7002 --node b

Every node tails the log (a non-fencing reader) and applies each record to its in-memory
map. Nodes campaign for leadership through ``walog.metadata.election`` (a *suggestion*: a
paused leader may still think it leads). The winner calls ``open_writer()``, which fences
and recovers the log's last ledgers, so a deposed leader can never append again; it then
reads the log to the end of the fenced ledgers before it serves writes, so it has applied
every acknowledged write. A write is answered only once its record is durable.

Line protocol (UTF-8, one request per line, keys and values without spaces):

    PUT key value  ->  OK <position>      (leader only; ERR otherwise)
    GET key        ->  VALUE value | NONE  (any node; a standby may lag a little)
    ROLE           ->  LEADER | STANDBY

On stdout each node prints one JSON line per state change (``standby``, ``leader``,
``fenced``, ``lost``) for scripts that drive it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys

import structlog

import walog.aio
from walog.errors import WriterFencedError
from walog.log.log import AsyncLog
from walog.log.position import Position, Record
from walog.log.reader import AsyncLogReader
from walog.log.writer import AsyncLogWriter
from walog.metadata.election import Leadership, elect


def announce(event: str, **fields: object) -> None:
    """One JSON line on stdout about a change of state."""
    print(json.dumps({"event": event, **fields}), flush=True)


class KVNode:
    """One node: the applied state, the tailing reader, and (when leading) the writer."""

    def __init__(self, log: AsyncLog, reader: AsyncLogReader) -> None:
        self.log = log
        self.reader = reader
        self.data: dict[str, str] = {}
        self.writer: AsyncLogWriter | None = None
        self.caught_up_to: Position | None = None  # set when taking over
        self.ready = asyncio.Event()  # leader has applied everything before its ledger

    def apply(self, record: Record) -> None:
        """Apply one log record to the map (records are JSON operations)."""
        op = json.loads(record.data)
        if op["op"] == "put":
            self.data[op["k"]] = op["v"]
        elif op["op"] == "del":
            self.data.pop(op["k"], None)

    async def follow(self) -> None:
        """Apply the log as it grows; when leading, stop once caught up to our ledger."""
        while True:
            record = await self.reader.read_next(timeout=0.2)
            if record is not None:
                self.apply(record)
                continue
            target = self.caught_up_to
            position = self.reader.position
            if target is not None and position is not None and position >= target:
                self.ready.set()
                return

    async def put(self, key: str, value: str) -> Position:
        """Make a write durable in the log, then apply it."""
        assert self.writer is not None
        record = json.dumps({"op": "put", "k": key, "v": value}).encode()
        position = await self.writer.append(record)
        self.data[key] = value
        return position

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection of the line protocol."""
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
        if words == ["ROLE"]:
            return "LEADER" if self.ready.is_set() else "STANDBY"
        if len(words) == 2 and words[0] == "GET":
            value = self.data.get(words[1])
            return "NONE" if value is None else f"VALUE {value}"
        if len(words) == 3 and words[0] == "PUT":
            if not self.ready.is_set():
                return "ERR not the leader"
            try:
                return f"OK {await self.put(words[1], words[2])}"
            except WriterFencedError:
                announce("fenced")
                asyncio.get_running_loop().call_soon(sys.exit, 3)
                return "ERR fenced: another node took over"
        return "ERR bad request"


async def lead(node: KVNode, leadership: Leadership) -> None:
    """Take over the log once elected; serve until the leadership is lost."""
    node.writer = await node.log.open_writer()  # fences the previous leader's ledgers
    node.caught_up_to = Position(node.writer.ledger_id, 0, 0)
    await node.ready.wait()
    announce("leader", epoch=leadership.epoch, ledger=node.writer.ledger_id)
    await leadership.wait_lost()
    announce("lost")


async def main(args: argparse.Namespace) -> int:
    host, port = args.listen.rsplit(":", 1)
    async with await walog.aio.connect(args.metadata) as client:
        log = await client.open_log(args.log)
        node = KVNode(log, await log.open_reader("earliest"))
        server = await asyncio.start_server(node.handle, host, int(port))
        follower = asyncio.create_task(node.follow())
        announce("standby", node=args.node, listen=args.listen)
        async with server:
            leadership = await elect(client.ctx.store, f"kv-{args.log}", args.node)
            await lead(node, leadership)
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    return 2  # lost the leadership: exit, a supervisor restarts us as a standby


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", required=True, help="walog metadata URI")
    parser.add_argument("--log", default="kv", help="log name (default kv)")
    parser.add_argument("--listen", required=True, help="HOST:PORT to serve on")
    parser.add_argument("--node", required=True, help="this node's id (for the election)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    # Library log lines go to stderr; stdout carries only the JSON state events.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    sys.exit(asyncio.run(main(parse())))

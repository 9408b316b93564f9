"""A replicated SQLite database: every node keeps an in-memory copy, the walog log is the
only durable state. Built on the sync ``walog.recipes.StateMachine``.

    python examples/sqlmirror/node.py --metadata URI --log books --listen 127.0.0.1:7101 --node a

A record is one SQL statement with its parameters; the leader appends it, and every node
runs it on its own copy in log order, so every copy goes through the same states. A
statement that fails (a constraint, a syntax error) fails identically on every node and
changes nothing. A snapshot is the whole database (``sqlite3.Connection.serialize``).

Protocol: one JSON object per line, one JSON answer per line.

    {"execute": "INSERT INTO t VALUES (?)", "params": [1]}
        -> {"ok": true, "rowcount": 1, "position": "L:E:S"}      (leader only)
    {"query": "SELECT * FROM t"}  ->  {"ok": true, "rows": [[1]]} (any node; read-only)
    {"role": true}                ->  {"ok": true, "role": "leader" | "standby" | ...}
Errors answer ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import argparse
import json
import socketserver
import sqlite3
import sys
import threading
from typing import IO, Any

import walog
from walog.log.position import Position, Record
from walog.recipes import NotLeaderError, SnapshotPolicy, StateMachine


class SQLiteMirror:
    """The state: an in-memory SQLite database changed only by log records."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.lock = threading.Lock()  # records are applied on the loop thread, reads elsewhere

    def apply(self, record: Record) -> dict[str, Any]:
        statement = json.loads(record.data)
        with self.lock:
            try:
                with self.db:  # one transaction per record: all of it or nothing
                    cursor = self.db.execute(statement["sql"], statement["params"])
            except sqlite3.Error as exc:
                return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return {"ok": True, "rowcount": cursor.rowcount, "position": str(record.position)}

    def snapshot(self) -> bytes:
        with self.lock:
            return self.db.serialize()

    def restore(self, data: IO[bytes], position: Position) -> None:
        with self.lock:
            self.db.deserialize(data.read())

    def query(self, sql: str, params: list[Any]) -> list[list[Any]]:
        with self.lock:
            self.db.execute("PRAGMA query_only = ON")
            try:
                return [list(row) for row in self.db.execute(sql, params)]
            finally:
                self.db.execute("PRAGMA query_only = OFF")


def answer(machine: StateMachine, mirror: SQLiteMirror, request: dict[str, Any]) -> Any:
    """The reply to one request."""
    try:
        if "execute" in request:
            statement = {"sql": request["execute"], "params": request.get("params", [])}
            return machine.execute(json.dumps(statement).encode(), timeout=60)
        if "query" in request:
            return {"ok": True, "rows": mirror.query(request["query"], request.get("params", []))}
        if "role" in request:
            return {"ok": True, "role": machine.role.value}
    except NotLeaderError:
        return {"ok": False, "error": "not the leader"}
    except (sqlite3.Error, walog.WalogError, TimeoutError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": False, "error": "bad request"}


def serve(machine: StateMachine, mirror: SQLiteMirror, listen: str) -> None:
    """Serve the JSON-lines protocol, a thread per connection, until interrupted."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                try:
                    reply = answer(machine, mirror, json.loads(line))
                except (ValueError, TypeError) as exc:
                    reply = {"ok": False, "error": f"bad request: {exc}"}
                self.wfile.write(json.dumps(reply).encode() + b"\n")

    host, port = listen.rsplit(":", 1)
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((host, int(port)), Handler) as server:
        print(json.dumps({"event": "serving", "listen": listen}), flush=True)
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", required=True, help="walog metadata URI")
    parser.add_argument("--log", default="sqlmirror", help="log name")
    parser.add_argument("--listen", required=True, help="HOST:PORT to serve on")
    parser.add_argument("--node", required=True, help="this node's id")
    parser.add_argument("--snapshot-every", type=int, default=1000, help="records per snapshot")
    args = parser.parse_args(argv)
    mirror = SQLiteMirror()
    with walog.connect(args.metadata) as client:
        log = client.open_log(args.log, roll_policy=walog.RollPolicy(max_entries=1000))
        policy = SnapshotPolicy(every_records=args.snapshot_every)
        with StateMachine(log, mirror, node_id=args.node, snapshot_policy=policy) as machine:
            machine.start()
            serve(machine, mirror, args.listen)
    return 0


if __name__ == "__main__":
    sys.exit(main())

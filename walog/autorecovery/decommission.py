"""``walog bookie decommission ID``: drain a bookie, then retire its identity.

1. Mark the bookie (``/bookies/decommissioning/ID``). The bookie, while it runs, follows
   the mark: it turns read-only, so no new ledger picks it and the writers of open ledgers
   replace it at their next add.
2. Re-replicate: auto-recovery passes that count the bookie as lost although it still
   serves (so the copies are read from it too, after the other bookies: for some entries
   it may hold the only copy left), until no ledger's ensembles name it. Each ledger is
   repaired under the lock the auto-recovery workers take (walog/autorecovery/daemon.py),
   from its metadata as read under it: a ledger a worker is repairing is left to a later
   pass, so the two never put one replacement at two indexes of a fragment.
   The last fragment of an open ledger is its writer's to change; one whose writer stays
   silent until ``--wait`` fails the command, naming the ledger.
3. Remove its cookie and its registration. The bookie can then be stopped with nothing
   under-replicated; started again on the same disk it refuses (its cookie is gone), and a
   new bookie formatted under the same id starts afresh (the mark is dropped then).

Running the command again after a failure continues where it stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import walog._loop
import walog.aio
from walog.autorecovery.replicate import recover
from walog.cli.options import CommandParser, add_connection_options, connect_options
from walog.errors import NoSuchLedgerError, WalogError
from walog.metadata.layout import (
    LEDGERS,
    bookie_path,
    cookie_path,
    decommission_mark,
    decommission_path,
    read_only_bookie_path,
)
from walog.metadata.store import NodeExistsError, NodeNotFoundError


class DecommissionError(WalogError):
    """The bookie could not be drained (what is left is named)."""


async def _ledgers_naming(client: walog.aio.AsyncClient, bookie_id: str) -> list[int]:
    naming = []
    for name in await client.ctx.store.children(LEDGERS):
        if not name.isdigit():
            continue
        try:
            metadata, _ = await client.ctx.read_metadata(int(name))
        except NoSuchLedgerError:
            continue
        if any(bookie_id in ensemble for _, ensemble in metadata.ensembles):
            naming.append(int(name))
    return sorted(naming)


async def decommission(
    client: walog.aio.AsyncClient,
    bookie_id: str,
    *,
    passwords: Sequence[bytes] = (b"",),
    timeout_s: float = 600.0,
    interval_s: float = 1.0,
) -> int:
    """Drain ``bookie_id`` and retire it (see the module docstring); returns the number of
    fragments moved off it.

    Raises:
        DecommissionError: no such bookie, or ledgers still name it after ``timeout_s``.
    """
    store = client.ctx.store
    if await store.exists(cookie_path(bookie_id)) is None:
        raise DecommissionError(
            f"no bookie {bookie_id} in this metadata store (no cookie at "
            f"{cookie_path(bookie_id)}); nothing to decommission"
        )
    with contextlib.suppress(NodeExistsError):
        await store.create(decommission_path(bookie_id), decommission_mark(bookie_id, time.time()))
    deadline = time.monotonic() + timeout_s
    moved = 0
    lock_as = f"walog bookie decommission {bookie_id}"
    while True:
        report = await recover(
            client.ctx, passwords=passwords, retiring={bookie_id}, lock_as=lock_as
        )
        moved += len(report.repaired)
        left = await _ledgers_naming(client, bookie_id)
        if not left:
            break
        if time.monotonic() > deadline:
            problems = "; ".join(f"{what}: {why}" for what, why in report.unrepairable[:5])
            locked = ", ".join(map(str, report.locked[:10]))
            raise DecommissionError(
                f"after {timeout_s:g}s, {len(left)} ledger(s) still name {bookie_id} "
                f"({', '.join(map(str, left[:10]))}): open ledgers whose writers have not "
                "written since (close them, or wait and run the command again)"
                + (f", or being repaired by auto-recovery (locked: {locked})" if locked else "")
                + (f", or unrepairable: {problems}" if problems else "")
            )
        await asyncio.sleep(interval_s)
    for path in (cookie_path(bookie_id), bookie_path(bookie_id), read_only_bookie_path(bookie_id)):
        with contextlib.suppress(NodeNotFoundError):
            await store.delete(path)
    return moved


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``walog bookie decommission``."""
    parser = CommandParser(
        prog="walog bookie decommission",
        description="Drain a bookie: no new ledger picks it, every fragment it holds is "
        "re-replicated elsewhere, then its cookie and registration are removed. "
        "See docs/bookies.md.",
    )
    parser.add_argument("bookie_id", metavar="ID", help="HOST:PORT of the bookie")
    add_connection_options(parser)
    parser.add_argument(
        "--password", action="append", default=[], help="a ledger password (repeatable)"
    )
    parser.add_argument(
        "--password-file",
        action="append",
        default=[],
        type=Path,
        metavar="F",
        help="a file whose first line is a ledger password (repeatable)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds to wait for the writers of open ledgers to move away [600]",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(argv: Sequence[str]) -> int:
    """``walog bookie decommission ID --metadata URI``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if not args.metadata:
        parser.error("--metadata URI is required (or set WALOG_METADATA)")

    try:
        files = [f.read_text(encoding="utf-8").splitlines()[:1] for f in args.password_file]
    except OSError as exc:
        parser.error(f"--password-file: {exc}")
    passwords = [b"", *(p.encode() for p in args.password)]
    passwords += [line[0].encode() for line in files if line]

    async def run() -> int:
        client = await walog.aio.connect(args.metadata, **connect_options(args))
        try:
            return await decommission(
                client, args.bookie_id, passwords=passwords, timeout_s=args.wait
            )
        finally:
            await client.close()

    try:
        moved = walog._loop.run(run())
    except (WalogError, OSError, ValueError) as exc:
        print(f"walog: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"bookie_id": args.bookie_id, "decommissioned": True, "moved": moved}))
        return 0
    print(f"bookie {args.bookie_id} decommissioned: {moved} fragment(s) moved; it can be stopped")
    return 0


__all__ = ["DecommissionError", "decommission", "main"]

"""A client of the replicated key-value service (examples/kvstore) on a client host.

``python -m tests.hosts.nemesis.kvclient OUT NODE [NODE ...]`` (each ``NODE`` is
``HOST:PORT``) sends ``PUT k<i> v<i>`` to whichever node leads, each key once and never
again, at most ``--rate`` a second, and appends ``{"key", "pos"}`` to ``OUT`` (fsynced JSON
lines) for every command acknowledged. A command that fails or gets no answer counts as
unknown (it may or may not be applied). On SIGTERM it stops writing and waits until every
node's map has the same digest (``DIGEST``), then writes ``{"unknown": N, "digests":
{NODE: HASH}, "same": BOOL}`` and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

from tests.chaos.records import JsonLines

REQUEST_TIMEOUT_S = 3.0
CONVERGE_S = 60.0


async def request(node: str, line: str, timeout: float = REQUEST_TIMEOUT_S) -> str:  # noqa: ASYNC109
    """One request to ``node``; its answer ("" when it gives none in time)."""
    host, port = node.rsplit(":", 1)

    async def ask() -> str:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(line.encode() + b"\n")
            await writer.drain()
            return (await reader.readline()).decode().strip()
        finally:
            writer.close()

    try:
        return await asyncio.wait_for(ask(), timeout)
    except (OSError, TimeoutError):
        return ""


async def leader(nodes: list[str]) -> str | None:
    """The node that says it leads, if one does."""
    roles = await asyncio.gather(*(request(node, "ROLE", 1.0) for node in nodes))
    return next((node for node, role in zip(nodes, roles, strict=True) if role == "LEADER"), None)


async def write(nodes: list[str], out: JsonLines, rate: float, stop: asyncio.Event) -> int:
    """Send commands until ``stop``; the number whose outcome is unknown."""
    unknown, index = 0, 0
    interval = 1.0 / rate
    while not stop.is_set():
        node = await leader(nodes)
        if node is None:
            await asyncio.sleep(0.2)  # nobody leads yet: ask again shortly
            continue
        while not stop.is_set():
            began = time.monotonic()
            key = f"k{index}"
            index += 1
            reply = await request(node, f"PUT {key} v{index}")
            if not reply.startswith("OK "):
                unknown += 0 if "not the leader" in reply else 1
                break
            out.write([{"key": key, "pos": reply.split()[1]}])
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - began)))
    return unknown


async def converge(nodes: list[str]) -> tuple[dict[str, str], bool]:
    """Every node's digest once they agree (or as they stand after ``CONVERGE_S``)."""
    deadline = time.monotonic() + CONVERGE_S
    while True:
        answers = await asyncio.gather(*(request(node, "DIGEST") for node in nodes))
        digests = {
            node: (answer.split() or [""])[0] for node, answer in zip(nodes, answers, strict=True)
        }
        same = len(set(digests.values())) == 1 and "" not in digests.values()
        if same or time.monotonic() > deadline:
            return digests, same
        await asyncio.sleep(0.5)  # standbys catch up in their own time


async def run(out_path: Path, nodes: list[str], rate: float) -> int:
    """Write until SIGTERM, then wait for the nodes to agree."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    out = JsonLines(out_path)
    unknown = await write(nodes, out, rate, stop)
    digests, same = await converge(nodes)
    out.write([{"unknown": unknown, "digests": digests, "same": same}])
    out.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.nemesis.kvclient")
    parser.add_argument("out", type=Path)
    parser.add_argument("nodes", nargs="+")
    parser.add_argument("--rate", type=float, default=20.0, help="commands a second at most")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.out, args.nodes, args.rate))


if __name__ == "__main__":
    sys.exit(main())

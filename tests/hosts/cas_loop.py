"""On a client host: compare-and-set increments of one record, one after another.

``python -m tests.hosts.cas_loop URI PATH SECONDS`` is the only writer of ``PATH``: it
reads ``(value, version)`` once, then sets ``value + 1`` at ``version`` again and again
for ``SECONDS``, keeping its own count. Being the only writer, it must never see a
conflict (a CAS applied but reported failed: lost) nor a value other than its own count
(a CAS applied twice). It prints ``{"done": N, "stored": VALUE, "errors": [...]}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from walog.errors import MetadataConflictError, MetadataError
from walog.metadata import open_store
from walog.metadata.store import NodeNotFoundError


async def run(uri: str, path: str, seconds: float) -> dict[str, object]:
    """The increments; what the module docstring says is printed."""
    errors: list[str] = []
    store = await open_store(uri)
    try:
        try:
            raw, version = await store.get(path)
        except NodeNotFoundError:
            version = await store.create(path, b"0")
            raw = b"0"
        done = int(raw)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                version = await store.set(path, b"%d" % (done + 1), version)
                done += 1
            except (
                MetadataError,
                MetadataConflictError,
            ) as exc:  # conflicts included: none may happen here
                errors.append(f"{type(exc).__name__}: {exc}")
                raw, version = await store.get(path)
                done = int(raw)
        stored, _ = await store.get(path)
        return {"done": done, "stored": int(stored), "errors": errors}
    finally:
        await store.close()


def main() -> None:
    """Parse the command line, run, print the result."""
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.cas_loop")
    parser.add_argument("uri")
    parser.add_argument("path")
    parser.add_argument("seconds", type=float)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.uri, args.path, args.seconds))))


if __name__ == "__main__":
    main()

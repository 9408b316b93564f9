"""Child process for the metadata contract tests: takes ids, or holds a registration.

``python -m tests.integration.metadata_helper ids URI COUNTER N`` prints N ids, one a line.
``python -m tests.integration.metadata_helper register URI PATH`` registers PATH, prints
``ready`` and waits until killed.
"""

from __future__ import annotations

import asyncio
import sys

from walog.metadata import open_store


async def _main(mode: str, uri: str, arg: str, count: str = "0") -> None:
    store = await open_store(uri)
    if mode == "ids":
        ids = [await store.next_id(arg) for _ in range(int(count))]
        print("\n".join(map(str, ids)), flush=True)
        await store.close()
        return
    await store.register(arg, b"helper")
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:]))

"""The control of a :class:`~walog.testing.HostCluster`: its own metadata session.

The test process is on the hosts' network, never faulted (:mod:`walog.testing.netns`): an
event loop thread of its own holds a metadata store for readiness checks and a walog
client for metadata reads and repairs.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from walog.errors import MetadataError
from walog.metadata.layout import bookie_path
from walog.metadata.store import NodeNotFoundError

if TYPE_CHECKING:
    from walog.aio import AsyncClient

T = TypeVar("T")


class ControlHost:
    """A metadata session (and, on first use, a walog client) of the test process.

    Args:
        metadata_uri: the cluster's metadata URI.
    """

    def __init__(self, metadata_uri: str) -> None:
        from walog._loop_thread import LoopThread
        from walog.metadata import open_store

        self._uri = metadata_uri
        self._loop = LoopThread(name="walog-hosts-control")
        self._store = self._loop.run(open_store(metadata_uri), timeout=60.0)
        self._client: AsyncClient | None = None

    def registered_since(self, bookie_id: str, started_at: float) -> bool:
        """True when the bookie's availability record exists and was written by a process
        started at ``started_at`` or later (not one left by a killed predecessor)."""
        try:
            raw, _ = self._loop.run(self._store.get(bookie_path(bookie_id)), timeout=10.0)
        except (NodeNotFoundError, MetadataError, TimeoutError):
            return False
        started = json.loads(raw).get("started", 0.0)
        return isinstance(started, int | float) and started >= started_at

    def call(self, func: Callable[[AsyncClient], Awaitable[T]], timeout: float) -> T:
        """``func(client)`` on the control host's loop, with its walog client. When it
        does not finish within ``timeout``, the TimeoutError shows where every task on the
        loop waited just before (what the call hung on)."""
        hung: list[str] = []

        async def run() -> T:
            loop = asyncio.get_running_loop()
            look = loop.call_later(max(0.0, timeout - 1.0), lambda: hung.append(_task_stacks()))
            try:
                if self._client is None:
                    from walog.aio import connect

                    self._client = await connect(self._uri)
                return await func(self._client)
            finally:
                look.cancel()

        try:
            return self._loop.run(run(), timeout=timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; the control loop's tasks then:\n{''.join(hung)}") from None

    def close(self) -> None:
        """Close the client and the store, stop the loop (errors ignored: teardown)."""
        for closing in (self._client, self._store):
            if closing is not None:
                try:
                    self._loop.run(closing.close(), timeout=5.0)
                except Exception:
                    continue
        self._loop.stop()


def _task_stacks() -> str:
    """Each task on the running loop and the chain of awaits it is suspended in."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        out.write(f"{task.get_name()}:\n")
        awaited: object = task.get_coro()
        for _ in range(60):
            frame = next(
                (
                    f
                    for a in ("cr_frame", "gi_frame", "ag_frame")
                    if (f := getattr(awaited, a, None))
                ),
                None,
            )
            if frame is None:
                out.write(f"    waits on {awaited!r}\n")
                break
            out.write(f"    {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}\n")
            awaited = next(
                (
                    w
                    for a in ("cr_await", "gi_yieldfrom", "ag_await")
                    if (w := getattr(awaited, a, None))
                ),
                None,
            )
    return out.getvalue()


__all__ = ["ControlHost"]

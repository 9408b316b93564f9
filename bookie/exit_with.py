"""``--exit-with PID``: stop the bookie, as SIGTERM does, once another process exits.

A harness that starts bookies (``walog.testing``) names itself, so its bookies do not
outlive it even when it is killed with SIGKILL and cleans up nothing. The watch is a
pidfd (``pidfd_open``), readable once the process exits: it follows the process, not the
thread that started the bookie (``PR_SET_PDEATHSIG`` fires when that thread ends), and a
recycled PID cannot be mistaken for it once the watch is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

import structlog

log = structlog.get_logger("bookie")


@contextlib.contextmanager
def exit_with(pid: int | None, stop: asyncio.Event) -> Iterator[None]:
    """Set ``stop`` once process ``pid`` exits, while the block runs (no watch when None).

    Raises:
        ProcessLookupError: no process ``pid`` exists (the message names the flag).
        OSError: the process cannot be watched (no pidfd support).
    """
    if pid is None:
        yield
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise ProcessLookupError(f"--exit-with {pid}: no such process") from None
    except OSError as exc:
        raise OSError(f"--exit-with {pid}: cannot watch the process: {exc.strerror}") from None
    loop = asyncio.get_running_loop()

    def exited() -> None:
        loop.remove_reader(fd)  # readable from now on: one call is enough
        log.info("process named by --exit-with exited; stopping", pid=pid)
        stop.set()

    try:
        loop.add_reader(fd, exited)
        yield
    finally:
        loop.remove_reader(fd)
        os.close(fd)


__all__ = ["exit_with"]

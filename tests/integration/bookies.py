"""Real bookie processes for tests: start, wait until SERVING, SIGTERM / SIGKILL, logs.

The process handle is ``walog.testing.BookieProcess`` (the one LocalCluster uses): each
bookie runs as ``python -m bookie`` with the repository on ``PYTHONPATH``; its output (JSON
log lines) goes to ``<data_dir>.log`` so a failing test can show it. Also here: raw
protocol helpers to build adds and drive an add stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from walog.digest import entry_digest, master_key
from walog.proto import bookie_pb2 as pb
from walog.proto import bookie_pb2_grpc as pb_grpc
from walog.testing import BookieProcess, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running_bookie(
    data_dir: Path, metadata: str, *, extra_args: Sequence[str] = ()
) -> Iterator[BookieProcess]:
    """A started, serving bookie, killed at the end if still running."""
    bookie = BookieProcess(data_dir, metadata, extra_args=extra_args)
    try:
        yield bookie.start().wait_ready()
    finally:
        bookie.stop_quietly()


def make_add(
    ledger_id: int,
    entry_id: int,
    data: bytes,
    *,
    lac: int = -1,
    password: bytes = b"",
    durability: int = pb.PERSISTENT,
    recovery: bool = False,
    digest: int | None = None,
) -> pb.AddEntry:
    """An add request with a correct digest (unless ``digest`` is given)."""
    return pb.AddEntry(
        entry=pb.Entry(
            ledger_id=ledger_id,
            entry_id=entry_id,
            lac=lac,
            data=data,
            digest=entry_digest(ledger_id, entry_id, lac, data) if digest is None else digest,
        ),
        master_key=master_key(password),
        recovery=recovery,
        durability=durability,  # type: ignore[arg-type]
    )


async def send_frames(
    stub: pb_grpc.BookieStub, frames: Sequence[pb.AddFrame]
) -> tuple[list[pb.AddResult], list[pb.ForceResult]]:
    """Send frames on one add stream, half-close, and collect every result."""
    call = stub.Add()
    for frame in frames:
        await call.write(frame)
    await call.done_writing()
    results: list[pb.AddResult] = []
    forces: list[pb.ForceResult] = []
    async for response in call:
        results.extend(response.results)
        forces.extend(response.forces)
    return results, forces


__all__ = [
    "REPO_ROOT",
    "BookieProcess",
    "free_port",
    "make_add",
    "running_bookie",
    "send_frames",
]

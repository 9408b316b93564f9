"""Real bookie processes for tests: start, wait until SERVING, SIGTERM / SIGKILL, logs.

The process handle is ``walog.testing.BookieProcess`` (the one LocalCluster uses): each
bookie runs as ``python -m bookie`` with the repository on ``PYTHONPATH``; its output (JSON
log lines) goes to ``<data_dir>.log`` so a failing test can show it. Also here: raw
protocol helpers to build adds and drive an add stream.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from walog.testing import BookieProcess, free_port
from walog.wire.digest import entry_digest, master_key
from walog.wire.packing import ENTRY_HEADER
from walog.wire.proto import bookie_pb2 as pb
from walog.wire.proto import bookie_pb2_grpc as pb_grpc

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


_batch_ids = itertools.count(1)
_ENTRY_IDS: dict[int, list[int]] = {}
"""The entry ids of every batch built here, by batch id (results may name none)."""


def batch_of(
    ledger_id: int,
    entries: Sequence[tuple[int, int, int, bytes]],
    *,
    key: bytes,
    durability: int = pb.PERSISTENT,
    recovery: bool = False,
) -> pb.AddBatch:
    """A batch of ``(entry_id, lac, digest, data)`` entries with a fresh batch id."""
    batch_id = next(_batch_ids)
    _ENTRY_IDS[batch_id] = [entry[0] for entry in entries]
    return pb.AddBatch(
        batch_id=batch_id,
        ledger_id=ledger_id,
        master_key=key,
        recovery=recovery,
        durability=durability,  # type: ignore[arg-type]
        entries=b"".join(
            ENTRY_HEADER.pack(entry_id, lac, digest, len(data)) + data
            for entry_id, lac, digest, data in entries
        ),
    )


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
) -> pb.AddBatch:
    """A batch of one add with a correct digest (unless ``digest`` is given)."""
    if digest is None:
        digest = entry_digest(ledger_id, entry_id, lac, data)
    return batch_of(
        ledger_id,
        [(entry_id, lac, digest, data)],
        key=master_key(password),
        durability=durability,
        recovery=recovery,
    )


class Answer(NamedTuple):
    """A bookie's answer to one entry (results name many entries; tests look at each)."""

    ledger_id: int
    entry_id: int
    status: int
    last_add_synced: int
    incarnation: int = 0
    max_entry_bytes: int = 0  # the bookie's limit, with ENTRY_TOO_LARGE


def answers(results: Iterable[pb.AddResult]) -> list[Answer]:
    """One :class:`Answer` per entry answered by ``results`` (of batches built here)."""
    return [
        Answer(r.ledger_id, entry_id, r.status, r.last_add_synced, r.incarnation, r.max_entry_bytes)
        for r in results
        for entry_id in (r.entry_ids or _ENTRY_IDS[r.batch_id])
    ]


async def send_frames(
    stub: pb_grpc.BookieStub, frames: Sequence[pb.AddFrame]
) -> tuple[list[Answer], list[pb.ForceResult]]:
    """Send frames on one add stream, half-close, and collect every answer."""
    call = stub.Add()
    for frame in frames:
        await call.write(frame)
    await call.done_writing()
    results: list[Answer] = []
    forces: list[pb.ForceResult] = []
    async for response in call:
        results.extend(answers(response.results))
        forces.extend(response.forces)
    return results, forces


__all__ = [
    "REPO_ROOT",
    "Answer",
    "BookieProcess",
    "answers",
    "batch_of",
    "free_port",
    "make_add",
    "running_bookie",
    "send_frames",
]

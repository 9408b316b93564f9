"""Tail lag while the bookies checkpoint (``walog bench``, scenario ``checkpoint``).

A checkpoint writes a bookie's write cache to its entry logs and index, on the disk its
journal syncs on (one disk for everything here), while the bookie goes on taking adds. A
tailing reader must keep its lag through it. The scenario fills the write caches with
:data:`FILL_MB` of 1 KiB entries (below the size at which a bookie checkpoints at once),
then runs the tail scenario for longer than the bookies' checkpoint interval, so that
each bookie's periodic checkpoint writes those entries while records are being tailed. The
bookies' own counters (``walog_bookie_checkpointed_entries_total`` on their metrics port)
must show that every one of them checkpointed at least the filled entries meanwhile, or
the run is repeated (a checkpoint may fall into the fill instead).
"""

from __future__ import annotations

import dataclasses
import urllib.request
from collections.abc import Callable, Coroutine
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

import walog.aio
from walog.bench import scenarios
from walog.errors import WalogError
from walog.testing import LocalCluster

FILL_MB = 40.0
"""Megabytes written to every bookie before the tail run (their write cache is 64 MiB)."""

CHECKPOINT_INTERVAL_S = 10.0
"""The bookies' ``--checkpoint-interval-s`` (their default; the bench passes none)."""

ATTEMPTS = 3
"""Runs tried before giving up on a checkpoint falling into the tail run."""

_COUNTER = "walog_bookie_checkpointed_entries"


@dataclasses.dataclass(frozen=True)
class CheckpointTail:
    """A tail run during which every bookie checkpointed the filled entries."""

    tail: scenarios.TailLag
    seconds: float
    checkpointed: list[int]
    """Entries each bookie checkpointed during the tail run."""
    filled: int
    """Entries written before it (every bookie holds all of them: E = Qw)."""


def checkpointed_entries(cluster: LocalCluster) -> list[int]:
    """Entries every bookie of ``cluster`` has checkpointed since it started."""
    counts = []
    for bookie in cluster.bookie_ids:
        with urllib.request.urlopen(f"{cluster.metrics_url(bookie)}/metrics", timeout=10) as r:
            text = r.read().decode()
        total = 0
        for family in text_string_to_metric_families(text):
            if family.name == _COUNTER:
                total = int(sum(s.value for s in family.samples if s.name.endswith("_total")))
        counts.append(total)
    return counts


def tail_while_checkpointing(
    cluster: LocalCluster,
    run: Callable[[Callable[[walog.aio.AsyncClient], Coroutine[Any, Any, Any]]], Any],
    seconds: float,
    progress: scenarios.Progress,
) -> CheckpointTail:
    """Fill the bookies' write caches, then tail for longer than a checkpoint interval
    until one run covers a checkpoint of the filled entries on every bookie.

    ``run`` runs a coroutine function with a connected client (the bench's own).

    Raises:
        WalogError: no run in :data:`ATTEMPTS` covered such a checkpoint.
    """
    seconds = max(seconds, CHECKPOINT_INTERVAL_S + 2.0)
    for _ in range(ATTEMPTS):
        filled_bytes = run(lambda c: scenarios.fill_ledger(c, FILL_MB))
        filled = filled_bytes // scenarios.ENTRY_BYTES
        before = checkpointed_entries(cluster)
        tail = run(lambda c: scenarios.tail_lag(c, seconds, progress=progress))
        after = checkpointed_entries(cluster)
        checkpointed = [a - b for a, b in zip(after, before, strict=True)]
        if min(checkpointed) >= filled:
            return CheckpointTail(tail, seconds, checkpointed, filled)
    raise WalogError(
        f"in {ATTEMPTS} tail runs of {seconds:g} s no bookie checkpoint covered the "
        f"{FILL_MB:g} MB written before each (entries checkpointed: {checkpointed})"
    )


__all__ = ["CheckpointTail", "checkpointed_entries", "tail_while_checkpointing"]

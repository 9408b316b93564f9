"""The history check of a replicated state machine: from every node's record of what it
applied (examples/kvstore's ``--history`` file), decide whether every acknowledged command
was applied exactly once, on every node, in the same order (pure; no processes here)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

from walog.log.position import Position


@dataclasses.dataclass
class Run:
    """What one node applied from one starting state: a process start (empty state) or a
    snapshot restore (the state at ``start``)."""

    node: str
    start: Position | None
    applied: list[tuple[Position, str]] = dataclasses.field(default_factory=list)


def parse_history(node: str, lines: Sequence[str]) -> list[Run]:
    """Split a history file into runs."""
    runs: list[Run] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if line == "started":
            runs.append(Run(node, None))
        elif line.startswith("restored "):
            runs.append(Run(node, Position.parse(line.split()[1])))
        else:
            position, record = line.split(" ", 1)
            assert runs, f"{node}: a record before the first 'started' line"
            runs[-1].applied.append((Position.parse(position), record))
    return [run for run in runs if run.applied or run.start is not None]


def check_histories(
    histories: Mapping[str, Sequence[str]], acked: Mapping[str, Position]
) -> list[tuple[Position, str]]:
    """Check every node's runs against each other and the acknowledged commands; return
    the log as the nodes applied it. Raises AssertionError naming the first violation."""
    runs = [run for node, lines in histories.items() for run in parse_history(node, lines)]
    log: dict[Position, str] = {}
    for run in runs:
        for position, record in run.applied:
            seen = log.setdefault(position, record)
            assert seen == record, f"{run.node} applied {record} at {position}, another {seen}"
    order = sorted(log)
    index = {position: i for i, position in enumerate(order)}
    for run in runs:
        if not run.applied:
            continue
        first = (
            0
            if run.start is None
            else next((i for i, p in enumerate(order) if p >= run.start), len(order))
        )
        last = index[run.applied[-1][0]]
        expected = order[first : last + 1]
        got = [position for position, _ in run.applied]
        assert got == expected, (
            f"{run.node} (from {run.start}) applied {len(got)} records where the log has "
            f"{len(expected)}: first difference at "
            f"{next((str(a) for a, b in zip(got, expected, strict=False) if a != b), 'end')}"
        )
    keys: dict[str, list[Position]] = {}
    for position in order:
        keys.setdefault(json.loads(log[position])["k"], []).append(position)
    for key, position in acked.items():
        assert keys.get(key) == [position], (
            f"acknowledged {key} at {position} but the nodes applied it at {keys.get(key)}"
        )
    return [(position, log[position]) for position in order]


__all__ = ["Run", "check_histories", "parse_history"]

"""Run the cost curves a ``walog bench`` command asks for (``--curves``, ``--only curve-*``).

Curves that need bookies of their own (other flags, a fresh start for memory) start a
:class:`walog.testing.LocalCluster` in the run's data directory; the others use the run's
cluster.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import walog._loop
import walog.aio
from walog.bench import curve_catchup, curve_logs, curve_metadata, curve_storage
from walog.bench.curves import CURVES, Curve, uptime, utc_now
from walog.bench.stats import cpu_seconds
from walog.testing import LocalCluster

T = TypeVar("T")


class CurveRun(Protocol):
    """What the curves need of a bench run (``walog.bench.command._Run``)."""

    uri: str
    cluster: LocalCluster | None
    data_dir: Path
    skipped: dict[str, str]

    def bar(self, name: str, unit: str = "op") -> AbstractContextManager[Callable[[int], None]]:
        """A progress bar; yields its update function."""

    def pids(self) -> dict[str, int]:
        """The client and the running bookies, by label."""

    def aio(self, body: Callable[[walog.aio.AsyncClient], Coroutine[Any, Any, T]]) -> T:
        """Run ``body`` with a connected client on the bench's event loop."""


def curve_command(args: list[str], name: str) -> str:
    """The command line that measures curve ``name`` alone, as run (with its niceness),
    without the options that only say where its results go."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--only", "--curves-report", "--output"):
            skip = True
            continue
        if arg in ("--curves", "--json") or arg.startswith(
            ("--only=", "--curves-report=", "--output=")
        ):
            continue
        kept.append(arg)
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    prefix = ["nice", "-n", str(niceness)] if niceness > 0 else []
    return shlex.join([*prefix, "walog", "bench", "--only", name, *kept])


def _cpu_by_process(pids: dict[str, int]) -> Callable[[], dict[str, float]]:
    return lambda: {label: cpu_seconds(pid) for label, pid in pids.items()}


def measure(run: CurveRun, wanted: frozenset[str], args: list[str], seconds: float) -> list[Curve]:
    """Measure the curves of :data:`CURVES` named in ``wanted``, in that order; each
    carries the command that measures it alone and the load and date at its start."""
    made: list[Curve] = []
    for name in (n for n in CURVES if n in wanted):
        if name in _NEEDS_LOCAL and run.cluster is None:
            run.skipped[name] = "needs the local cluster (not with --metadata)"
            continue
        load, date = uptime(), utc_now()
        with run.bar(name, unit="step") as tick:
            measured = _MEASURES[name](run, seconds, tick)
        for curve in measured:
            curve.command, curve.uptime, curve.date = curve_command(args, name), load, date
        made += measured
    return made


def _logs(run: CurveRun, seconds: float, tick: Callable[[int], None]) -> list[Curve]:
    counts = _sizes(run, seconds).logs
    return [run.aio(lambda c: curve_logs.many_logs(c, seconds, counts, progress=tick))]


def _idle(run: CurveRun, seconds: float, tick: Callable[[int], None]) -> list[Curve]:
    cpu = _cpu_by_process(run.pids())
    counts, idle_s = _sizes(run, seconds).logs, max(seconds, 5.0)
    return [run.aio(lambda c: curve_logs.idle_readers(c, idle_s, cpu, counts, progress=tick))]


def _metadata(run: CurveRun, seconds: float, tick: Callable[[int], None]) -> list[Curve]:
    sizes = _sizes(run, seconds)
    curve, kinds = walog._loop.run(
        curve_metadata.metadata_per_operation(
            run.uri, sizes.log_lengths, sizes.other_ledgers, progress=tick
        )
    )
    curve.notes.append(
        "Every metadata call of the client is counted by a wrapper around its store "
        "(`walog.bench.curve_metadata.CountingStore`), with the record bytes read and "
        "written. A roll: one record, `roll()`, and what follows it (closing the old "
        "ledger, the stored retention, which deletes nothing here). A takeover: "
        "`open_writer()` on a second client. Retention passes: `enforce_retention` with "
        "a policy that deletes nothing (a client's first and next pass) and one that "
        f"deletes the head ledger. The cluster holds {sizes.other_ledgers} ledgers outside "
        "the log, made before it. A client's first retention pass reads each ledger of the cluster "
        "outside the log once (looking for sink ledgers left behind; it remembers those "
        "that are not), so its calls follow the cluster's ledgers, not the log's. A "
        "takeover reads each ledger created in the cluster since the log's last scan for "
        "orphans (at its last takeover or retention pass) that is not the log's: ledgers "
        "other logs create meanwhile add one `get` each to the next takeover."
    )
    for operation, by_length in kinds.items():
        calls = set(by_length.values())
        text = "; ".join(sorted(calls))
        curve.notes.append(f"Calls of a {operation}, by kind: {text}.")
    return [curve]


def _index(run: CurveRun, seconds: float, tick: Callable[[int], None]) -> list[Curve]:
    sizes = _sizes(run, seconds)
    return list(
        curve_storage.index_and_memory(
            run.data_dir / "curves", sizes.ledgers, sizes.entries, progress=tick
        )
    )


def _catchup(run: CurveRun, seconds: float, tick: Callable[[int], None]) -> list[Curve]:
    sizes = _sizes(run, seconds)
    return [curve_catchup.catch_up(run.data_dir / "curves", sizes.catchup_mb, progress=tick)]


def _gc(run: CurveRun, seconds: float, tick: Callable[[int], None]) -> list[Curve]:
    sizes = _sizes(run, seconds)
    return [curve_storage.gc_and_compaction(run.data_dir / "curves", sizes.gc_mb, progress=tick)]


class _Sizes:
    """The sizes of the storage curves: full, or small when ``--seconds`` is below 1."""

    def __init__(self, tiny: bool, max_entries: int | None, max_ledgers: int | None) -> None:
        self.logs = [1, 10] if tiny else list(curve_logs.LOG_COUNTS)
        self.log_lengths = [3, 12] if tiny else list(curve_metadata.LENGTHS)
        self.other_ledgers = 5 if tiny else curve_metadata.OTHER_LEDGERS
        ledgers = [100, 1000] if tiny else [1000, 10_000, 100_000]
        entries = [10_000, 100_000] if tiny else [100_000, 1_000_000, 10_000_000]
        self.ledgers = [n for n in ledgers if max_ledgers is None or n <= max_ledgers]
        self.entries = [n for n in entries if max_entries is None or n <= max_entries]
        self.catchup_mb = 16.0 if tiny else float(1 << 30) / 1e6
        self.gc_mb = [16.0, 32.0] if tiny else [64.0, 256.0, 1024.0]


def _sizes(run: CurveRun, seconds: float) -> _Sizes:
    args = getattr(run, "args", None)
    return _Sizes(
        seconds < 1.0,
        getattr(args, "curve_max_entries", None),
        getattr(args, "curve_max_ledgers", None),
    )


_MEASURES: dict[str, Callable[[CurveRun, float, Callable[[int], None]], list[Curve]]] = {
    "curve-logs": _logs,
    "curve-idle": _idle,
    "curve-index": _index,
    "curve-catchup": _catchup,
    "curve-metadata": _metadata,
    "curve-gc": _gc,
}

_NEEDS_LOCAL = frozenset({"curve-idle", "curve-index", "curve-catchup", "curve-gc"})
"""Curves that read the bookies' processes or files, or start bookies of their own."""


def measured_names() -> Iterator[str]:
    """The curves this build can measure."""
    return iter(_MEASURES)


__all__ = ["CurveRun", "curve_command", "measure", "measured_names"]

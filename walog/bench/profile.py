"""Sampling profiles of the client and the bookies while a scenario runs (py-spy).

py-spy attaches to running processes by pid, so the bookies are profiled as they serve real
traffic. Samples are grouped by where their innermost Python frame lives (self time), and
by area (gRPC, protobuf, asyncio, walog modules, the bookie's journal and storage).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]*)(?::\d+)?\)$")

# (area, substring of the frame's file path), first match wins.
_AREAS: tuple[tuple[str, str], ...] = (
    ("bookie journal (write + fdatasync)", "bookie/storage/journal"),
    ("bookie storage / index", "bookie/storage"),
    ("bookie add stream", "bookie/server/add_stream"),
    ("bookie server", "bookie/"),
    # The sync facades: walog/client.py, each package's sync.py, the loop thread.
    ("walog sync facade", "walog/client"),
    ("walog sync facade", "/sync.py"),
    ("walog sync facade", "walog/_loop_thread"),
    ("walog sync facade", "walog/_sinks"),
    ("walog sync facade", "walog/_futures"),
    ("walog ledger (writer, quorum)", "walog/ledger/"),
    ("walog log (record batching)", "walog/log/"),
    ("walog transport", "walog/transport/"),
    ("walog bench harness", "walog/bench/"),
    ("protobuf", "google/protobuf"),
    ("grpc (Cython + C core)", "grpc"),
    ("asyncio event loop", "asyncio/"),
    ("threading / queues", "threading"),
    ("threading / queues", "concurrent/futures"),
)


# Leaf frames that are a thread waiting, not working (py-spy's idle detection misses some
# when sampling without stopping the process): the event loop's select, lock and condition
# waits, the profiler's own wait for py-spy.
_IDLE_LEAVES = frozenset(
    {
        ("select", "selectors.py"),
        ("wait", "threading.py"),
        ("_wait_for_tstate_lock", "threading.py"),
        ("run", "threading.py"),
        ("_wait", "subprocess.py"),
        ("get", "queue.py"),
    }
)


def _idle(func: str, path: str) -> bool:
    return (func.rsplit(".", 1)[-1], path.rsplit("/", 1)[-1]) in _IDLE_LEAVES


def py_spy() -> str | None:
    """Path of the py-spy binary, or None when it is not installed."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


@dataclasses.dataclass
class Profile:
    """Self-time samples of one process."""

    label: str
    samples: int
    by_function: list[tuple[str, float]]
    by_area: list[tuple[str, float]]


@contextlib.contextmanager
def sampling(pids: dict[str, int], directory: Path, seconds: float) -> Iterator[list[Profile]]:
    """Profile ``pids`` (label -> pid) for at most ``seconds`` while the block runs.

    The yielded list is filled with one :class:`Profile` per process after the block ends.
    """
    binary = py_spy()
    results: list[Profile] = []
    if binary is None:
        yield results
        return
    directory.mkdir(parents=True, exist_ok=True)
    running: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
    for label, pid in pids.items():
        out = directory / f"{label}.txt"
        command = [binary, "record", "--pid", str(pid), "--format", "raw", "--rate", "200"]
        command += ["--duration", str(max(1, int(seconds))), "--nonblocking", "-o", str(out)]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        running.append((label, out, proc))
    try:
        yield results
    finally:
        for label, out, proc in running:
            try:
                proc.wait(seconds + 30)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
            if out.exists():
                results.append(summarise(label, out.read_text().splitlines()))


def _where(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), ""
    return match["func"], match["file"]


def _area(path: str) -> str:
    for area, marker in _AREAS:
        if marker in path:
            return area
    return "other (interpreter, libraries)"


def _short(path: str) -> str:
    for root in ("site-packages/", "lib/python3.11/", "/work/main/"):
        if root in path:
            return path.split(root, 1)[1]
    return path


def summarise(label: str, lines: Sequence[str], top: int = 12) -> Profile:
    """Fold py-spy's raw (collapsed) stacks into self-time shares by function and area.

    Samples whose innermost frame is a known wait (select, lock and condition waits) are
    idle and left out. A sample's self time goes to its innermost frame; its area is that
    of the innermost frame belonging to a known area, so time in a C extension (no Python
    frames of its own) is charged to the area of the Python code that called it.
    """
    functions: collections.Counter[str] = collections.Counter()
    areas: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("thread ")]
        if not frames:
            continue
        func, path = _where(frames[-1])
        if _idle(func, path):
            continue
        total += count
        functions[f"{func} ({_short(path)})"] += count
        area = "other (interpreter, libraries)"
        for frame in reversed(frames):
            area = _area(_where(frame)[1])
            if not area.startswith("other"):
                break
        areas[area] += count
    share = (lambda n: round(100.0 * n / total, 1)) if total else (lambda n: 0.0)
    return Profile(
        label=label,
        samples=total,
        by_function=[(name, share(n)) for name, n in functions.most_common(top)],
        by_area=[(name, share(n)) for name, n in areas.most_common()],
    )

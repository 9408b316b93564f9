"""The mixed nemesis's schedule: which fault strikes what, when and for how long (pure).

One integer seed decides every fault. Kinds (the target in brackets):

- ``isolate_bookie`` [bookie host], ``isolate_client`` [writer or state-machine host],
  ``isolate_rack`` [rack: its two bookies and its ZooKeeper node]: the host's cable pulled;
- ``cut_writer_bookie`` [bookie host]: what the log's current writer sends to the bookie is
  dropped (one way); ``cut_bookie_zk`` [``BOOKIE>ZK``]: what the bookie sends to one
  ZooKeeper node is dropped (one way);
- ``kill_zk_leader``: SIGKILL the ZooKeeper leader, started again when the fault ends;
  ``zk_quorum_loss``: SIGSTOP the leader and one more node (a majority frozen, not crashed:
  ZooKeeper 3.8.0 can lose committed transactions when a majority crashes around a resync,
  see docs/correctness.md), SIGCONT when the fault ends;
- ``kill_bookie`` (SIGKILL, restarted on its disk at the end) and ``pause_bookie``
  (SIGSTOP, then SIGCONT; past the session timeout its registration expires);
- ``fill_disk`` [the bookie on a small mount]: ballast fills its disk past the read-only
  mark, removed at the end; ``eio_disk`` [the bookie with the EIO library]: its disk
  answers EIO, then the disk works again and the bookie restarts;
- ``decommission`` [bookie host], once: ``walog bookie decommission``, then the bookie
  stops for good (no end);
- ``takeover``: not a fault: a new writer process takes the log over (fencing the last).

The bound, so that writes can always go on again once the faults in force end: at most
``MAX_FAULTY_BOOKIES`` bookies are faulty at a time besides the decommissioned one (with 6
bookies and E=3, three stay writable), counting a rack's isolation as both its bookies and
a restarted bookie as faulty for ``MARGIN_S`` more; at most two ZooKeeper nodes are down
(a rack's counts), and one ZooKeeper process fault at a time; at most one client host
isolated; at most ``MAX_FAULTS`` faults at once.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from tests.chaos.nemesis import Step, format_schedule, timeline

MAX_FAULTY_BOOKIES = 2
MAX_FAULTS = 3
MAX_ZK_DOWN = 2
MARGIN_S = 3.0
"""Seconds a bookie or ZooKeeper node counts as faulty after its fault ends (its restart,
re-registration, the disk check that makes a bookie writable again)."""

DURATIONS = {
    "isolate_bookie": (2.0, 10.0),
    "isolate_client": (3.0, 10.0),
    "isolate_rack": (3.0, 10.0),
    "cut_writer_bookie": (3.0, 10.0),
    "cut_bookie_zk": (3.0, 10.0),
    "kill_zk_leader": (2.0, 8.0),
    "zk_quorum_loss": (2.0, 8.0),
    "kill_bookie": (2.0, 12.0),
    "pause_bookie": (1.0, 8.0),
    "fill_disk": (4.0, 12.0),
    "eio_disk": (3.0, 10.0),
}
"""Seconds each kind lasts, at least and at most."""
FAULT_KINDS = tuple(DURATIONS)
ZK_PROCESS_FAULTS = ("kill_zk_leader", "zk_quorum_loss")


@dataclasses.dataclass(frozen=True)
class Layout:
    """What the nemesis may strike: host names by role.

    Attributes:
        bookies: bookie hosts, each with its rack.
        zookeepers: ZooKeeper hosts, each with its rack.
        clients: client hosts that run writers or state-machine nodes.
        disk_bookie: the bookie whose data directory is a small mount.
        eio_bookie: the bookie that runs with the EIO library.
    """

    bookies: dict[str, str]
    zookeepers: dict[str, str]
    clients: tuple[str, ...]
    disk_bookie: str
    eio_bookie: str


@dataclasses.dataclass(frozen=True)
class Fault:
    """``kind`` on ``target`` from ``start`` for ``duration`` seconds (0: no end)."""

    start: float
    kind: str
    target: str
    duration: float

    def __str__(self) -> str:
        return f"t={self.start:7.2f}s {self.kind:<17} {self.target or '-':<8} {self.duration:.2f}s"


@dataclasses.dataclass
class _Busy:
    """Until when each resource is taken."""

    until: dict[str, float] = dataclasses.field(default_factory=dict)
    faults: list[tuple[float, float]] = dataclasses.field(default_factory=list)

    def free(self, name: str, t: float) -> bool:
        return self.until.get(name, 0.0) <= t

    def count(self, names: Sequence[str], t: float) -> int:
        return sum(1 for name in names if not self.free(name, t))

    def take(self, names: Sequence[str], until: float) -> None:
        for name in names:
            self.until[name] = max(self.until.get(name, 0.0), until)


def _touched(kind: str, target: str, layout: Layout) -> list[str]:
    """The bookie, ZooKeeper and client hosts (and ``zk-process``) a fault takes."""
    if kind == "isolate_rack":
        return [h for h, r in {**layout.bookies, **layout.zookeepers}.items() if r == target]
    if kind == "cut_bookie_zk":
        return [target.split(">")[0]]
    if kind == "kill_zk_leader":
        return ["zk-process", "zk-a"]
    if kind == "zk_quorum_loss":
        return ["zk-process", "zk-a", "zk-b"]
    return [target]


def _targets(kind: str, layout: Layout, retired: set[str]) -> list[str]:
    bookies = sorted(b for b in layout.bookies if b not in retired)
    if kind in ("isolate_bookie", "cut_writer_bookie", "kill_bookie", "pause_bookie"):
        return bookies
    if kind == "cut_bookie_zk":
        return [f"{b}>{z}" for b in bookies for z in sorted(layout.zookeepers)]
    if kind == "isolate_client":
        return list(layout.clients)
    if kind == "isolate_rack":
        racks = {r for b, r in layout.bookies.items() if b not in retired}
        return sorted(racks & set(layout.zookeepers.values()))
    if kind == "fill_disk":
        return [layout.disk_bookie]
    if kind == "eio_disk":
        return [layout.eio_bookie]
    return [""]


def _allowed(names: list[str], t: float, busy: _Busy, layout: Layout) -> bool:
    if not all(busy.free(name, t) for name in names):
        return False
    faulty = busy.count(list(layout.bookies), t) + sum(1 for n in names if n in layout.bookies)
    zks = [*layout.zookeepers, "zk-a", "zk-b"]
    zk_down = busy.count(zks, t) + sum(1 for n in names if n in zks)
    clients = busy.count(list(layout.clients), t) + sum(1 for n in names if n in layout.clients)
    running = sum(1 for start, end in busy.faults if start <= t < end)
    return (
        faulty <= MAX_FAULTY_BOOKIES
        and zk_down <= MAX_ZK_DOWN
        and clients <= 1
        and running < MAX_FAULTS
    )


def make_schedule(seed: int, seconds: float, layout: Layout) -> list[Fault]:
    """The faults (and takeovers) of one run, by start time; the same arguments give the
    same list. Every kind comes up in turn (a shuffled deck; while none of the deck's
    kinds fits the bound, one that strikes no bookie may come up again), and one
    decommission falls between a quarter and nine twentieths into the run."""
    if seconds <= 0:
        raise ValueError(f"make_schedule needs seconds > 0, got {seconds}")
    rng = random.Random(seed)
    busy = _Busy()
    retired: set[str] = set()
    schedule: list[Fault] = []
    deck: list[str] = []
    decommission_at = rng.uniform(0.25, 0.45) * seconds
    t = rng.uniform(1.0, 3.0)
    while t < seconds:
        if decommission_at <= t and not retired:
            spare = [b for b in _targets("kill_bookie", layout, retired) if busy.free(b, t)]
            spare = [b for b in spare if b not in (layout.disk_bookie, layout.eio_bookie)]
            if spare:
                target = rng.choice(spare)
                retired.add(target)  # never struck again, and not counted among the faulty
                schedule.append(Fault(round(t, 3), "decommission", target, 0.0))
        if not deck:
            deck = list(FAULT_KINDS)
            rng.shuffle(deck)
        # The deck first; while its kinds find no room, the kinds that strike no bookie.
        spares = [k for k in ("isolate_client", *ZK_PROCESS_FAULTS) if k not in deck]
        rng.shuffle(spares)
        for kind in [*deck, *spares]:
            choices = [
                target
                for target in _targets(kind, layout, retired)
                if _allowed(_touched(kind, target, layout), t, busy, layout)
                and not (kind in ZK_PROCESS_FAULTS and not busy.free("zk-process", t))
            ]
            if not choices:
                continue
            if kind in deck:
                deck.remove(kind)
            target = rng.choice(choices)
            low, high = DURATIONS[kind]
            duration = round(rng.uniform(low, high), 3)
            busy.take(_touched(kind, target, layout), t + duration + MARGIN_S)
            busy.faults.append((t, t + duration))
            schedule.append(Fault(round(t, 3), kind, target, duration))
            break
        t += rng.uniform(1.0, 3.5)
    takeover = rng.uniform(4.0, 10.0)
    while takeover < seconds:
        schedule.append(Fault(round(takeover, 3), "takeover", "", 0.0))
        takeover += rng.uniform(6.0, 15.0)
    return sorted(schedule, key=lambda fault: fault.start)


__all__ = [
    "FAULT_KINDS",
    "MAX_FAULTS",
    "MAX_FAULTY_BOOKIES",
    "MAX_ZK_DOWN",
    "Fault",
    "Layout",
    "Step",
    "format_schedule",
    "make_schedule",
    "timeline",
]

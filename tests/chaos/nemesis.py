"""The nemesis: a seeded fault schedule (pure) and the code that carries it out.

Fault model (one integer seed decides everything the nemesis does and when):

- ``kill_bookie``: SIGKILL a bookie; restart it on the same disk after the fault's duration.
- ``stop_bookie``: SIGTERM (clean shutdown), restart later.
- ``pause_bookie``: SIGSTOP for less than the ZooKeeper session timeout, then SIGCONT: a
  silent peer whose registration survives.
- ``expire_bookie``: SIGSTOP for longer than the session timeout: its ZooKeeper session
  expires and its registration goes; after SIGCONT it must register again.
- ``kill_writer``: SIGKILL a writer process; a new incarnation starts after the duration
  and takes over (fencing whoever writes by then).
- ``expire_writer``: expire a writer's ZooKeeper session with the classic trick: a second
  client attaches to the same session id and password and closes it.

At most ``max_faulty_bookies`` bookies are faulty (or still restarting) at a time, so the
ensemble size stays reachable.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

BOOKIE_FAULTS = ("kill_bookie", "stop_bookie", "pause_bookie", "expire_bookie")
WRITER_FAULTS = ("kill_writer", "expire_writer")
RESTART_MARGIN_S = 8.0
"""Seconds a restarted bookie counts as faulty after its fault ends (its start, and the
wait for its crashed predecessor's registration to expire)."""


@dataclasses.dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``kind`` on ``target`` from ``start`` for ``duration`` seconds."""

    start: float
    kind: str
    target: int
    duration: float

    def __str__(self) -> str:
        return f"t={self.start:7.2f}s {self.kind:<13} #{self.target} for {self.duration:.2f}s"


def make_schedule(
    seed: int,
    seconds: float,
    *,
    bookies: int,
    writers: int,
    session_timeout: float,
    max_faulty_bookies: int,
) -> list[Fault]:
    """The faults of one run, ordered by start time; the same arguments give the same list."""
    if max_faulty_bookies < 0 or bookies < 1 or writers < 1 or seconds <= 0:
        raise ValueError("make_schedule needs bookies >= 1, writers >= 1, seconds > 0")
    rng = random.Random(seed)
    busy_until = [0.0] * bookies
    writer_down_until = [0.0] * writers
    schedule: list[Fault] = []
    t = rng.uniform(1.0, 3.0)
    while t < seconds:
        free = [b for b in range(bookies) if busy_until[b] <= t]
        faulty = bookies - len(free)
        kinds = list(WRITER_FAULTS)
        if free and faulty < max_faulty_bookies:
            kinds += list(BOOKIE_FAULTS) * 2  # bookie faults twice as likely
        kind = rng.choice(kinds)
        if kind in BOOKIE_FAULTS:
            target = rng.choice(free)
            if kind == "pause_bookie":
                duration = rng.uniform(0.3, session_timeout * 0.6)
            elif kind == "expire_bookie":
                duration = session_timeout + rng.uniform(1.0, 3.0)
            else:
                duration = rng.uniform(0.5, 5.0)
            margin = RESTART_MARGIN_S if kind in ("kill_bookie", "stop_bookie") else 1.0
            busy_until[target] = t + duration + margin
        else:
            # A writer is not killed again while it is down (one process per writer).
            target = rng.choice([w for w in range(writers) if writer_down_until[w] <= t] or [-1])
            if target < 0:
                t += rng.uniform(0.5, 3.0)
                continue
            duration = rng.uniform(0.2, 3.0) if kind == "kill_writer" else 0.0
            writer_down_until[target] = t + duration
        schedule.append(Fault(round(t, 3), kind, target, round(duration, 3)))
        t += rng.uniform(0.5, 3.0)
    return schedule


def format_schedule(schedule: Sequence[object]) -> str:
    """One line per fault."""
    return "\n".join(str(fault) for fault in schedule) or "(no faults)"


def expire_session(connect_string: str, session_file: Path, timeout: float = 5.0) -> str:
    """Expire the ZooKeeper session recorded in ``session_file``; return what happened.

    A second client attaches with the same session id and password and then closes the
    session; the first client's next reconnect finds it expired.
    """
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    try:
        recorded = json.loads(session_file.read_text())
        client_id = (int(recorded["session_id"]), bytes.fromhex(recorded["password"]))
    except (OSError, ValueError, KeyError) as exc:
        return f"no session to expire ({exc})"
    twin = KazooClient(hosts=connect_string, client_id=client_id, timeout=timeout)
    try:
        twin.start(timeout=timeout)
    except (KazooException, KazooTimeoutError) as exc:
        return f"could not attach to session {client_id[0]:#x} ({type(exc).__name__})"
    finally:
        twin.stop()  # closes the session: the server deletes it and its ephemerals
        twin.close()
    return f"expired session {client_id[0]:#x}"


class Timed(Protocol):
    """A scheduled fault of any run: it starts at ``start`` and lasts ``duration`` seconds
    (0: an instant fault, e.g. a session expired, that no step undoes)."""

    @property
    def start(self) -> float: ...

    @property
    def duration(self) -> float: ...


F = TypeVar("F", bound=Timed)


@dataclasses.dataclass(frozen=True)
class Step(Generic[F]):
    """A timed action of the executor: a fault starting (``heal`` False) or ending."""

    at: float
    order: int
    fault: F
    heal: bool


def timeline(schedule: Sequence[F]) -> list[Step[F]]:
    """The start and end steps of every fault, in time order (ends before starts at a tie);
    an instant fault has no end."""
    steps = []
    for order, fault in enumerate(schedule):
        steps.append(Step(fault.start, order, fault, heal=False))
        if fault.duration > 0:
            steps.append(Step(fault.start + fault.duration, order, fault, heal=True))
    steps.sort(key=lambda step: (step.at, not step.heal, step.order))
    return steps


Action = Callable[[Fault, bool], str]
"""Carries out one step (``heal`` False: inject, True: undo) and says what it did."""

"""The replicated state machine (walog.recipes) as a simulated scenario.

Two or three nodes run :class:`~walog.recipes.machine.AsyncStateMachine` over one log, each
as its own client process: they campaign, lead, tail as standbys, take snapshots into
ledgers and truncate the log behind them. A driver submits commands to whichever node
leads; nodes crash (their process dies: session gone, tasks stopped) and come back
(restoring the newest snapshot, replaying the rest), and their ``close()`` may be cancelled
half way. Bookies crash and pause meanwhile (the world's nemesis).

The service keeps the list of ``(position, command)`` it applied. Rules (checked on the
spot and at the end, when every node is back and caught up):

- ``sm_state_not_fold``: every node's state is the fold of the log up to its applied
  position: any two states agree on every position both hold, and a state holds every
  record the log still has before the node's applied position, in log order;
- ``sm_applied_twice``: no command is applied twice (each is submitted once);
- ``sm_leaders_share_epoch``: two nodes never lead in the same epoch;
- ``sm_answer_lost``: a command whose submit returned is in every caught-up node's state,
  at the place its answer named;
- ``sm_close_hangs``: a node's ``close()`` returns (:data:`CLOSE_LIMIT_S`), also when it
  comes as the node's term ends and when it is itself cancelled.

In schedules with cancellation, one node may start as a rival leader
(:attr:`Cluster.rival`) and leaders may be stopped just as their terms end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable
from typing import IO, Any

from tests.sim.world import World, cancellable, guard, into_a_burst
from walog import mutations
from walog.aio import AsyncClient
from walog.errors import WalogError
from walog.log.position import Position, Record
from walog.log.retention import RollPolicy
from walog.recipes.machine import AsyncStateMachine
from walog.recipes.policy import Role, SnapshotPolicy
from walog.wire.durability import Durability

SM_LOG = "sm"
DRIVE_S = 20.0
"""Commands are submitted for at most this long after the node faults ended."""
SUBMIT_TIMEOUT_S = 10.0
"""How long the driver waits for a command's answer."""
CATCH_UP_S = 60.0
"""Virtual seconds the nodes get to agree once every fault is over."""
CLOSE_LIMIT_S = 60.0
"""``sm_close_hangs``: a node's ``close()`` returns within this long (its writer's close and
its resignation are bounded by the client's timeouts)."""
RIVAL_ELECTION = "sm-rival"


class ListService:
    """A service whose state is every ``(position, command)`` it applied, in order."""

    def __init__(self, world: World, node: str) -> None:
        self.world = world
        self.node = node
        self.state: list[tuple[Position, bytes]] = []

    def apply(self, record: Record) -> int:
        """Append the command; its answer is the state's length."""
        if any(data == record.data for _, data in self.state):
            self.world.history.violate(
                "sm_applied_twice",
                f"{self.node} applied {record.data!r} again at {record.position}",
            )
        self.state.append((record.position, record.data))
        return len(self.state)

    def snapshot(self) -> bytes:
        """The state as JSON."""
        return json.dumps([[str(p), d.decode()] for p, d in self.state]).encode()

    def restore(self, data: IO[bytes], position: Position) -> None:
        """Take a snapshot's state."""
        self.state = [(Position.parse(p), d.encode()) for p, d in json.loads(data.read())]


@dataclasses.dataclass
class Node:
    """One node process (a new one after every crash)."""

    name: str
    client: AsyncClient
    service: ListService
    machine: AsyncStateMachine
    alive: bool = True


class Cluster:
    """The nodes of one schedule, their crashes, and what they answered."""

    def __init__(self, world: World, names: list[str], durability: Durability) -> None:
        self.world = world
        self.names = names
        self.durability = durability
        rng = world.rng
        self.roll = RollPolicy(max_entries=rng.randint(1, 4))
        every = rng.choice([None, 2, 5, 12])
        self.snapshots = SnapshotPolicy(every_records=every, keep=rng.randint(1, 2))
        self.nodes: dict[str, Node] = {}
        self.watches: list[asyncio.Future[None]] = []
        self.incarnations: dict[str, int] = {}
        self.answers: list[tuple[bytes, int, str]] = []  # command, answer, leader
        # Drawn only in schedules with cancellation, so the others stay as they were.
        self.rival: str | None = None
        """A node whose first incarnation campaigns in an election of its own, as a leader
        paused past its session's end meets its successor: the two take the log from each
        other, each fencing the other's writer, until the rival is restarted."""
        self.close_on_step_down = 0.0
        """The chance that a leader whose term just ended is stopped a few loop iterations
        later (while its term winds down: the window where stopping it once hung)."""
        if world.cancel_chance:
            self.rival = names[-1] if rng.random() < 0.3 else None
            self.close_on_step_down = rng.choice([0.0, 0.5, 1.0])
        self.leaders: dict[int, str] = {}  # epoch -> node that led in it
        self.states: list[tuple[str, list[tuple[Position, bytes]]]] = []  # of dead nodes

    async def start(self, name: str) -> None:
        """Start node ``name`` as a new process."""
        world = self.world
        number = self.incarnations[name] = self.incarnations.get(name, -1) + 1
        who = f"{name}.{number}"
        client = world.async_client(who)
        log = await guard(
            world,
            who,
            client.open_log(
                SM_LOG, ensemble_size=2, write_quorum=2, ack_quorum=2,
                durability=self.durability, roll_policy=self.roll,
            ),
        )  # fmt: skip
        if log is None:
            await world.crash_client(client.ctx)
            return
        service = ListService(world, name)
        election = RIVAL_ELECTION if name == self.rival and number == 0 else None
        try:
            machine = AsyncStateMachine(
                log, service, node_id=name, snapshot_policy=self.snapshots, election=election
            )
        except (ValueError, WalogError) as exc:
            world.trace.log(f"{who} refused: {exc}")
            await world.crash_client(client.ctx)
            return
        if await guard(world, who, machine.start()) is None and machine._task is None:
            await world.crash_client(client.ctx)
            return
        node = self.nodes[name] = Node(who, client, service, machine)
        world.trace.log(
            f"{who} STARTED at {machine.applied_position}" + (" (rival)" if election else "")
        )
        if self.close_on_step_down and world.rng.random() < self.close_on_step_down:
            self.watches.append(asyncio.ensure_future(self._close_after_term(name, node)))

    async def _close_after_term(self, name: str, node: Node) -> None:
        """Stop ``node`` a few loop iterations after its first term as leader ended."""
        machine = node.machine
        try:
            await machine.wait_for(lambda: machine.role is Role.LEADER)
            await machine.wait_for(lambda: machine.role is not Role.LEADER)
        except (WalogError, TimeoutError):
            return  # the node stopped
        for _ in range(self.world.rng.randint(0, 40)):
            await asyncio.sleep(0)
        if self.nodes.get(name) is node:
            self.world.trace.log(f"{node.name} STOPPED after its term")
            await self.close(name)

    async def crash(self, name: str) -> None:
        """The node's process dies: its session ends, its tasks stop mid-way."""
        node = self.nodes.pop(name, None)
        if node is None:
            return
        self.world.trace.log(f"{node.name} NODE CRASH")
        self.states.append((node.name, list(node.service.state)))
        task = node.machine._task
        if task is not None:
            task.cancel()
        await self.world.crash_client(node.client.ctx)

    async def close(self, name: str) -> None:
        """The node is stopped (its close may be cancelled half way)."""
        node = self.nodes.pop(name, None)
        if node is None:
            return
        world = self.world
        closing = asyncio.ensure_future(
            cancellable(world, node.name, "state machine close", node.machine.close())
        )
        if not (await asyncio.wait({closing}, timeout=CLOSE_LIMIT_S))[0]:
            world.history.violate(
                "sm_close_hangs", f"{node.name}'s close() did not return in {CLOSE_LIMIT_S}s"
            )
        self.states.append((node.name, list(node.service.state)))
        await self.world.crash_client(node.client.ctx)

    async def watch_leaders(self) -> None:
        """``sm_leaders_share_epoch``: which node leads in which epoch, looked at often."""
        while True:
            for name, node in list(self.nodes.items()):
                machine = node.machine
                if machine.role is Role.LEADER:
                    other = self.leaders.setdefault(machine.epoch, name)
                    if other != name:
                        self.world.history.violate(
                            "sm_leaders_share_epoch",
                            f"{name} and {other} both led in epoch {machine.epoch}",
                        )
            await asyncio.sleep(0.01)

    def leader(self) -> Node | None:
        """A node that leads now, if any."""
        for node in self.nodes.values():
            if node.machine.role is Role.LEADER:
                return node
        return None


async def driver(world: World, cluster: Cluster, commands: int, until: float) -> None:
    """Submit ``commands`` commands, each once, to whichever node leads, until ``until``
    (loop time)."""
    rng = world.rng
    sent = 0
    while sent < commands and world.loop.time() < until:
        node = cluster.leader()
        if node is None:
            await asyncio.sleep(0.05)
            continue
        command = f"c{sent}".encode()
        sent += 1
        # A client gives up on a node that does not answer (its process may have died).
        submit = asyncio.wait_for(node.machine.submit(command), SUBMIT_TIMEOUT_S)
        answer = await cancellable(world, "driver", "submit", submit)
        if answer is not None:
            world.trace.log(f"driver {command!r} -> {answer} by {node.name}")
            cluster.answers.append((command, int(answer), node.name))
        await asyncio.sleep(rng.uniform(0.0, 0.05))


async def node_faults(world: World, cluster: Cluster, until: float) -> None:
    """Crash, stop and restart nodes until ``until`` (loop time), then start every node
    that is down."""
    rng = world.rng
    while world.loop.time() < until:
        await asyncio.sleep(rng.uniform(0.1, 0.8))
        if world.cancel_chance and rng.random() < 0.5:
            await into_a_burst(world)
        name = rng.choice(cluster.names)
        if name not in cluster.nodes:
            await cluster.start(name)
        elif rng.random() < 0.7:
            await cluster.crash(name)
        else:
            await cluster.close(name)
    if cluster.rival in cluster.nodes and cluster.incarnations[cluster.rival] == 0:
        await cluster.close(cluster.rival)  # it comes back in the common election
    for name in cluster.names:
        if name not in cluster.nodes:
            await cluster.start(name)


async def state_machine(world: World) -> None:
    """Nodes lead, follow, snapshot and crash while a driver submits commands."""
    rng = world.rng
    durability = Durability.PERSISTENT
    if rng.random() < 0.3 and mutations.enabled("statemachine_accepts_volatile"):
        durability = Durability.VOLATILE  # refused with the rule; tried when it is off
    names = [f"n{i}" for i in range(rng.randint(2, 3))]
    cluster = Cluster(world, names, durability)
    watch = asyncio.ensure_future(cluster.watch_leaders())
    try:
        for name in names:
            await cluster.start(name)
        until = world.loop.time() + rng.uniform(1.0, 4.0)
        await asyncio.gather(
            driver(world, cluster, rng.randint(3, 25), until + DRIVE_S),
            node_faults(world, cluster, until),
        )
        await _agree(world, cluster)
    finally:
        watch.cancel()
        for closer in cluster.watches:
            closer.cancel()


async def _agree(world: World, cluster: Cluster) -> None:
    """Wait until every node is up and the standbys applied what the leader did, then
    check the rules."""
    deadline = world.loop.time() + CATCH_UP_S
    while world.loop.time() < deadline:
        for name in cluster.names:
            if name not in cluster.nodes:  # its last start failed (bookies, metadata): again
                await cluster.start(name)
        leader = cluster.leader()
        if leader is not None and len(cluster.nodes) == len(cluster.names):
            ends = {
                n.service.state[-1][0] if n.service.state else None for n in cluster.nodes.values()
            }
            if len(ends) == 1:
                break
        await asyncio.sleep(0.1)
    else:
        world.history.violate("stalled", "the state machine nodes never agreed")
    states = [(n.name, list(n.service.state)) for n in cluster.nodes.values()]
    check_states(world, [*cluster.states, *states])
    for command, answer, leader_name in cluster.answers:
        for name, state in states:
            if len(state) < answer or state[answer - 1][1] != command:
                world.history.violate(
                    "sm_answer_lost",
                    f"{leader_name} answered {command!r} as #{answer}; {name} has "
                    f"{state[answer - 1][1] if len(state) >= answer else None!r} there",
                )
    for name in list(cluster.nodes):
        await cluster.close(name)


def check_states(world: World, states: Iterable[tuple[str, list[tuple[Position, bytes]]]]) -> None:
    """``sm_state_not_fold`` over every state seen: positions increase within a state, and
    any two states agree on every position both hold and on the order of those positions."""
    seen: dict[Position, tuple[str, bytes]] = {}
    for name, state in states:
        positions = [p for p, _ in state]
        if positions != sorted(set(positions)):
            world.history.violate("sm_state_not_fold", f"{name} applied out of log order")
        for position, data in state:
            other = seen.setdefault(position, (name, data))
            if other[1] != data:
                world.history.violate(
                    "sm_state_not_fold",
                    f"{name} has {data!r} at {position}, {other[0]} has {other[1]!r}",
                )
    # Between two positions one state holds, no other state holds a record the first
    # skipped (states are prefixes of one log, up to truncation by snapshots).
    everything = sorted(seen)
    for name, state in states:
        held = {p for p, _ in state}
        if len(state) < 2:
            continue
        first, last = state[0][0], state[-1][0]
        skipped = [p for p in everything if first < p < last and p not in held]
        if skipped:
            world.history.violate(
                "sm_state_not_fold", f"{name} skipped {skipped[:3]} that others applied"
            )


SM_SCENARIOS: dict[str, Any] = {"state_machine": state_machine}

__all__ = ["SM_SCENARIOS", "check_states", "state_machine"]

"""A register on the replicated state machine, read on every node (``sm_register``).

Three nodes run :class:`~walog.recipes.machine.AsyncStateMachine` over one log (the
cluster of tests/sim/sm_scenarios.py). The register's value is the last command applied. A
writer submits unique values to whichever node leads; readers read the register on random
nodes, leader and standbys alike, with ``AsyncStateMachine.read``. Meanwhile the leader is
killed (and restarted later), paused (its metadata calls held, cut from every bookie; a
long pause expires its session, as a stopped process's would) or cut from every bookie;
bookies crash and pause (the world's nemesis).

Every operation is recorded with its invocation and answer times (loop time); a write whose
answer never came may or may not have taken effect. At the end the history must be
linearizable for a register (tests/linearizability.py), rule
``sm_read_not_linearizable``; the state machine rules of tests/sim/sm_scenarios.py are
checked too. ``sm_register`` reads with ``"linearizable"``; ``sm_register_stale`` with
``"stale"``, where the checker must find violations (tests/sim/test_register.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tests.linearizability import Op, SearchTooLarge, check
from tests.sim.sm_scenarios import DRIVE_S, SUBMIT_TIMEOUT_S, Cluster, ListService, _agree
from tests.sim.world import World
from walog.errors import WalogError
from walog.recipes.reads import Consistency
from walog.wire.durability import Durability

NODES = ("n0", "n1", "n2")
READ_TIMEOUT_S = 5.0
"""How long a reader waits for one read."""
READERS = 2
SESSION_EXPIRY_S = 1.0
"""A node paused longer than this loses its metadata session's records (its election
record with them)."""


def register_value(service: ListService) -> bytes | None:
    """The register: the last command the node applied (None before any)."""
    return service.state[-1][1] if service.state else None


class RegisterHistory:
    """The operations of one schedule."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ops: list[Op] = []

    def now(self) -> float:
        """The loop's clock."""
        return self.world.loop.time()


async def writer(world: World, cluster: Cluster, history: RegisterHistory, count: int) -> None:
    """Write ``count`` unique values, each once, through whichever node leads."""
    rng = world.rng
    deadline = history.now() + DRIVE_S
    sent = 0
    while sent < count and history.now() < deadline:
        node = cluster.leader()
        if node is None:
            await asyncio.sleep(0.05)
            continue
        value = f"c{sent}".encode()
        sent += 1
        invoked = history.now()
        try:
            await asyncio.wait_for(node.machine.submit(value), SUBMIT_TIMEOUT_S)
        except (WalogError, TimeoutError) as exc:
            world.trace.log(f"writer {value!r} unknown: {type(exc).__name__}")
            history.ops.append(Op("write", value, invoked, None, node.name))
        else:
            history.ops.append(Op("write", value, invoked, history.now(), node.name))
            world.trace.log(f"writer {value!r} done by {node.name}")
        await asyncio.sleep(rng.uniform(0.0, 0.1))


async def reader(
    world: World,
    cluster: Cluster,
    history: RegisterHistory,
    consistency: Consistency,
    who: str,
    done: asyncio.Event,
) -> None:
    """Read the register on random nodes until ``done``."""
    rng = world.rng
    while not done.is_set():
        await asyncio.sleep(rng.uniform(0.0, 0.15))
        if not cluster.nodes:
            continue
        name = rng.choice(sorted(cluster.nodes))
        node = cluster.nodes[name]
        invoked = history.now()
        try:
            value = await asyncio.wait_for(
                node.machine.read(register_value, consistency, timeout=READ_TIMEOUT_S),
                READ_TIMEOUT_S + 1.0,
            )
        except (WalogError, TimeoutError) as exc:
            world.trace.log(f"{who} read on {node.name} failed: {type(exc).__name__}")
            continue
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # this reader is being stopped
            # The node's process died under the read (its task was cancelled).
            world.trace.log(f"{who} read on {node.name} failed: the node crashed")
            continue
        history.ops.append(Op("read", value, invoked, history.now(), f"{who}@{node.name}"))
        world.trace.log(f"{who} read {value!r} on {node.name}")


async def leader_faults(world: World, cluster: Cluster, until: float) -> None:
    """Kill, pause or cut off the leader until ``until`` (loop time); killed nodes come
    back later."""
    rng = world.rng
    pending: list[asyncio.Future[None]] = []
    while world.loop.time() < until:
        await asyncio.sleep(rng.uniform(0.2, 1.0))
        node = cluster.leader()
        for name in NODES:
            if name not in cluster.nodes and rng.random() < 0.5:
                await cluster.start(name)
        if node is None:
            continue
        name = node.name.split(".")[0]
        action = rng.random()
        if action < 0.35:
            await cluster.crash(name)
        elif action < 0.7:
            pending.append(asyncio.ensure_future(_pause(world, cluster, name, rng.uniform(0.2, 3))))
        else:
            pending.append(asyncio.ensure_future(_cut_off(world, node.name, rng.uniform(0.2, 2))))
    await asyncio.gather(*pending)
    for name in NODES:
        if name not in cluster.nodes:
            await cluster.start(name)


async def _pause(world: World, cluster: Cluster, name: str, seconds: float) -> None:
    """The node's process stops for ``seconds``: no metadata call gets through, no bookie
    is reached; past :data:`SESSION_EXPIRY_S` the metadata server expires its session."""
    node = cluster.nodes.get(name)
    if node is None:
        return
    store = node.client.ctx.store
    resumed = asyncio.Event()
    store.resumed = resumed  # type: ignore[attr-defined]
    world.trace.log(f"{node.name} PAUSED for {seconds:.2f}s")
    for bookie in world.bookies:
        world.net.partition(node.name, bookie)
    try:
        if seconds > SESSION_EXPIRY_S:
            await asyncio.sleep(SESSION_EXPIRY_S)
            world.trace.log(f"{node.name} SESSION EXPIRED")
            world.meta.expire(node.name)
            seconds -= SESSION_EXPIRY_S
        await asyncio.sleep(seconds)
    finally:
        resumed.set()
        for bookie in world.bookies:
            world.net.heal(node.name, bookie)
        world.trace.log(f"{node.name} RESUMED")


async def _cut_off(world: World, client: str, seconds: float) -> None:
    """Cut ``client`` from every bookie for ``seconds``."""
    world.trace.log(f"{client} CUT OFF for {seconds:.2f}s")
    for bookie in world.bookies:
        world.net.partition(client, bookie)
    await asyncio.sleep(seconds)
    for bookie in world.bookies:
        world.net.heal(client, bookie)


async def sm_register(world: World, consistency: Consistency = "linearizable") -> None:
    """Writes and reads of a register on three nodes while the leader fails."""
    rng = world.rng
    cluster = Cluster(world, list(NODES), Durability.PERSISTENT)
    history = RegisterHistory(world)
    done = asyncio.Event()
    watch = asyncio.ensure_future(cluster.watch_leaders())
    try:
        for name in NODES:
            await cluster.start(name)
        until = world.loop.time() + rng.uniform(1.0, 4.0)
        readers = [
            asyncio.ensure_future(reader(world, cluster, history, consistency, f"r{i}", done))
            for i in range(READERS)
        ]
        await asyncio.gather(
            writer(world, cluster, history, rng.randint(5, 20)),
            leader_faults(world, cluster, until),
        )
        done.set()
        await asyncio.gather(*readers)
        await _agree(world, cluster)
    finally:
        done.set()
        watch.cancel()
    try:
        verdict = check(history.ops)
    except SearchTooLarge as exc:
        world.trace.log(f"linearizability search gave up: {exc}")
        return
    world.trace.log(f"register history: {len(history.ops)} operations")
    if verdict is not None:
        world.history.violate("sm_read_not_linearizable", verdict)


async def sm_register_stale(world: World) -> None:
    """:func:`sm_register` with stale reads: the checker must find them."""
    await sm_register(world, "stale")


REGISTER_SCENARIOS: dict[str, Callable[[World], Awaitable[None]]] = {
    "sm_register": sm_register,
    "sm_register_stale": sm_register_stale,
}

__all__ = ["REGISTER_SCENARIOS", "register_value", "sm_register", "sm_register_stale"]

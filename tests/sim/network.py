"""A simulated network between protocol clients and :class:`SimBookie` s.

:class:`SimBookiePool` / :class:`SimBookieClient` implement walog's transport interface
(walog/transport/base.py) in memory, so the real protocol code runs unchanged over it.
Faults come from the loop's seeded RNG, per message, following :class:`FaultConfig`:

- delay: every request and every reply takes a random time in ``delay_s``;
- drop: a lost request or reply leaves the client waiting until its timeout, then
  :class:`BookieUnavailableError` (an *unknown* answer, never *absent*);
- duplicate: an add is delivered twice (bookies must be idempotent);
- reorder: adds of one client to one bookie normally arrive in order, like a stream;
  with ``reorder`` they may overtake each other;
- partitions: :meth:`SimNetwork.partition` cuts a client from a bookie until healed;
- a crashed bookie refuses connections: requests fail quickly; a paused bookie holds
  requests and serves them on resume (possibly after the client gave up).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tests.sim.bookie import SimBookie
from tests.sim.loop import SimLoop
from walog.config import Timeouts
from walog.errors import BookieUnavailableError
from walog.transport.base import (
    AddReply,
    BookieClient,
    BookiePool,
    FenceReply,
    ForceReply,
    ReadLacReply,
    ReadReply,
)
from walog.wire.durability import Durability

R = TypeVar("R")
Label = tuple[str, tuple[Any, ...]]
"""A request's description for the trace: %-format and arguments, formatted lazily."""


@dataclasses.dataclass(frozen=True)
class FaultConfig:
    """Per-message fault probabilities and delays of the network."""

    delay_s: tuple[float, float] = (0.0005, 0.005)
    drop: float = 0.0
    duplicate: float = 0.0
    reorder: bool = False
    refuse_s: float = 0.001
    """How long a client takes to notice a crashed bookie (connection refused)."""


class SimNetwork:
    """Links between named clients and the bookies, with the faults of :class:`FaultConfig`."""

    def __init__(self, loop: SimLoop, bookies: dict[str, SimBookie], faults: FaultConfig):
        self.loop = loop
        self.rng = loop.rng
        self.trace = loop.trace
        self.bookies = bookies
        self.faults = faults
        self._cut: set[tuple[str, str]] = set()
        self._backlog: dict[str, list[Callable[[], None]]] = {b: [] for b in bookies}
        # Arrival time of the last message of each client->bookie stream (in-order delivery).
        self._stream_tail: dict[tuple[str, str], float] = {}
        # Told (client, ledger id) of every fence a client sends, fencing reads included.
        self.fence_observers: list[Callable[[str, int], None]] = []

    def fencing(self, client: str, ledger_id: int) -> None:
        """``client`` sends a fence for ``ledger_id`` (a recovery's first step)."""
        for observe in self.fence_observers:
            observe(client, ledger_id)

    # -- faults -------------------------------------------------------------------------

    def partition(self, client: str, bookie_id: str) -> None:
        """Cut the link: messages either way are lost until :meth:`heal`."""
        self._cut.add((client, bookie_id))
        self.trace.log(f"net cut {client}<->{bookie_id}")

    def heal(self, client: str | None = None, bookie_id: str | None = None) -> None:
        """Restore matching links (all links when no argument is given)."""
        self._cut = {
            (c, b)
            for c, b in self._cut
            if not ((client is None or c == client) and (bookie_id is None or b == bookie_id))
        }
        self.trace.log(f"net heal {client or '*'}<->{bookie_id or '*'}")

    def pause(self, bookie_id: str) -> None:
        """Freeze a bookie: requests queue up unanswered."""
        self.bookies[bookie_id].paused = True
        self.trace.log(f"{bookie_id} PAUSE")

    def resume(self, bookie_id: str) -> None:
        """Unfreeze a bookie and serve what queued up, in arrival order."""
        bookie = self.bookies[bookie_id]
        bookie.paused = False
        self.trace.log(f"{bookie_id} RESUME")
        backlog, self._backlog[bookie_id] = self._backlog[bookie_id], []
        for serve in backlog:
            serve()

    def crash(self, bookie_id: str) -> None:
        """Crash a bookie (see :meth:`SimBookie.crash`); queued requests are lost."""
        self._backlog[bookie_id] = []
        self.bookies[bookie_id].crash()

    def restart(self, bookie_id: str) -> None:
        """Restart a crashed bookie."""
        self.bookies[bookie_id].restart()

    # -- delivery -------------------------------------------------------------------------

    def _delay(self) -> float:
        low, high = self.faults.delay_s
        return self.rng.uniform(low, high)

    def _lost(self, client: str, bookie_id: str) -> bool:
        return (client, bookie_id) in self._cut or self.rng.random() < self.faults.drop

    def send(
        self,
        client: str,
        bookie_id: str,
        what: Label,
        handler: Callable[[SimBookie], Any],
        reply_to: asyncio.Future[Any],
        *,
        stream: bool = False,
        duplicable: bool = False,
    ) -> None:
        """Deliver a request after a delay, apply it, and carry the reply back.

        ``handler`` runs against the bookie and returns the reply or an awaitable of it.
        Requests on the ``stream`` of one client and bookie keep their order unless the
        fault config reorders.
        """
        arrival = self.loop.time() + self._delay()
        if stream and not self.faults.reorder:
            key = (client, bookie_id)
            # Strictly after the previous message: timers due at the same instant run in
            # heap order, not in the order they were scheduled.
            arrival = max(arrival, self._stream_tail.get(key, 0.0) + 1e-7)
            self._stream_tail[key] = arrival
        lost = self._lost(client, bookie_id)
        self.loop.call_at(arrival, self._arrive, client, bookie_id, what, handler, reply_to, lost)
        if duplicable and self.rng.random() < self.faults.duplicate:
            again = arrival + self._delay()
            self.loop.call_at(again, self._arrive, client, bookie_id, what, handler, None, False)

    def _arrive(
        self,
        client: str,
        bookie_id: str,
        what: Label,
        handler: Callable[[SimBookie], Any],
        reply_to: asyncio.Future[Any] | None,
        lost: bool,
    ) -> None:
        if lost:
            self.trace.log("%s->%s LOST " + what[0], client, bookie_id, *what[1])
            return
        bookie = self.bookies[bookie_id]
        if not bookie.up:
            if reply_to is not None:
                self.loop.call_later(self.faults.refuse_s, _fail, reply_to, bookie_id, "refused")
            return
        if bookie.paused:
            self._backlog[bookie_id].append(
                lambda: self._arrive(client, bookie_id, what, handler, reply_to, False)
            )
            return
        dup = "" if reply_to is not None else " (dup)"
        self.trace.log("%s->%s " + what[0] + dup, client, bookie_id, *what[1])
        result = handler(bookie)
        if isinstance(result, Awaitable):
            task = asyncio.ensure_future(result)
            task.add_done_callback(
                lambda t: self._reply_from_task(client, bookie_id, what, t, reply_to)
            )
        else:
            self._reply(client, bookie_id, what, result, reply_to)

    def _reply_from_task(
        self,
        client: str,
        bookie_id: str,
        what: Label,
        task: asyncio.Future[Any],
        reply_to: asyncio.Future[Any] | None,
    ) -> None:
        if task.cancelled() or task.exception() is not None:
            return  # the bookie crashed while holding the request: no reply
        self._reply(client, bookie_id, what, task.result(), reply_to)

    def _reply(
        self,
        client: str,
        bookie_id: str,
        what: Label,
        reply: Any,
        reply_to: asyncio.Future[Any] | None,
    ) -> None:
        if reply_to is None:
            return
        if self._lost(client, bookie_id):
            self.trace.log("%s->%s LOST reply " + what[0], bookie_id, client, *what[1])
            return
        self.loop.call_later(self._delay(), _resolve, reply_to, reply)


def _resolve(future: asyncio.Future[Any], reply: Any) -> None:
    if not future.done():
        future.set_result(reply)


def _fail(future: asyncio.Future[Any], bookie_id: str, why: str) -> None:
    if not future.done():
        future.set_exception(BookieUnavailableError(f"bookie {bookie_id}: {why}"))


class SimBookieClient(BookieClient):
    """One client's connection to one simulated bookie."""

    def __init__(self, pool: SimBookiePool, bookie_id: str) -> None:
        self.bookie_id = bookie_id
        self._pool = pool
        self._net = pool.network

    def _request(self, timeout: float) -> asyncio.Future[Any]:
        loop = self._net.loop
        future: asyncio.Future[Any] = loop.create_future()
        if self._pool.closed:
            future.set_exception(BookieUnavailableError(f"pool closed ({self.bookie_id})"))
            return future
        timer = loop.call_later(timeout, _fail, future, self.bookie_id, "timed out")
        future.add_done_callback(lambda _f: timer.cancel())
        pending = self._pool.pending
        pending[future] = None
        future.add_done_callback(lambda f: pending.pop(f, None))
        return future

    def add(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        data: bytes,
        digest: int,
        master_key: bytes,
        *,
        recovery: bool = False,
        durability: Durability = Durability.PERSISTENT,
    ) -> asyncio.Future[AddReply]:
        """Queue an add on this client's stream to the bookie."""
        future = self._request(self._pool.timeouts.add)
        # The bookie model notes which of its incarnations the client heard from (for the
        # invariants), before the client handles the answer.
        future.add_done_callback(
            functools.partial(self._net.bookies[self.bookie_id].heard_by, self._pool.name)
        )
        payload = bytes(data)
        what = ("add L%d e%d lac=%d%s", (ledger_id, entry_id, lac, " R" if recovery else ""))
        self._net.send(
            self._pool.name,
            self.bookie_id,
            what,
            lambda b: b.add(
                ledger_id, entry_id, lac, payload, digest, master_key, recovery, durability
            ),
            future,
            stream=True,
            duplicable=True,
        )
        return future

    def send_lac(self, ledger_id: int, lac: int, master_key: bytes) -> None:
        """Queue an explicit LAC on the stream (no reply)."""
        if self._pool.closed:
            return
        done: asyncio.Future[Any] = self._net.loop.create_future()
        done.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)
        self._net.send(
            self._pool.name,
            self.bookie_id,
            ("lac L%d lac=%d", (ledger_id, lac)),
            lambda b: b.send_lac(ledger_id, lac, master_key),
            done,
            stream=True,
        )

    async def force(self, ledger_id: int, master_key: bytes) -> ForceReply:
        """Sync the ledger's entries sent so far (ordered after them on the stream)."""
        future = self._request(self._pool.timeouts.add)
        self._net.send(
            self._pool.name,
            self.bookie_id,
            ("force L%d", (ledger_id,)),
            lambda b: b.force(ledger_id, master_key),
            future,
            stream=True,
        )
        reply: ForceReply = await future
        return reply

    async def read(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes = b"",
        previous_lac: int = -1,
        long_poll_timeout: float = 0.0,
    ) -> ReadReply:
        """A range read, a fencing recovery read or a LAC long poll."""
        future = self._request(self._pool.timeouts.read + long_poll_timeout)
        kind = "fread" if fence else ("poll" if long_poll_timeout > 0 else "read")
        if fence:
            self._net.fencing(self._pool.name, ledger_id)
        self._net.send(
            self._pool.name,
            self.bookie_id,
            (kind + " L%d e%d..%d", (ledger_id, first_entry_id, last_entry_id)),
            lambda b: b.read(
                ledger_id,
                first_entry_id,
                last_entry_id,
                fence,
                master_key,
                previous_lac,
                long_poll_timeout,
            ),
            future,
        )
        reply: ReadReply = await future
        return reply

    async def read_lac(self, ledger_id: int) -> ReadLacReply:
        """The bookie's LAC and last entry for the ledger."""
        return await self._unary(("readlac L%d", (ledger_id,)), lambda b: b.read_lac(ledger_id))

    async def fence(self, ledger_id: int, master_key: bytes) -> FenceReply:
        """Fence the ledger on the bookie."""
        self._net.fencing(self._pool.name, ledger_id)
        return await self._unary(
            ("fence L%d", (ledger_id,)), lambda b: b.fence(ledger_id, master_key)
        )

    async def _unary(self, what: Label, handler: Callable[[SimBookie], R]) -> R:
        future = self._request(self._pool.timeouts.read)
        self._net.send(self._pool.name, self.bookie_id, what, handler, future)
        reply: R = await future
        return reply


class SimBookiePool(BookiePool):
    """The bookie connections of one simulated client process.

    Args:
        network: the shared simulated network.
        name: the client's name on the network (partitions and traces use it).
        timeouts: the client's request time limits.
    """

    def __init__(self, network: SimNetwork, name: str, timeouts: Timeouts) -> None:
        self.network = network
        self.name = name
        self.timeouts = timeouts
        self.closed = False
        # Insertion-ordered (not a set): failing them on close must be deterministic.
        self.pending: dict[asyncio.Future[Any], None] = {}
        self._clients: dict[str, SimBookieClient] = {}

    def get(self, bookie_id: str) -> BookieClient:
        """The connection to ``bookie_id``."""
        if bookie_id not in self.network.bookies:
            raise BookieUnavailableError(f"unknown bookie {bookie_id}")
        client = self._clients.get(bookie_id)
        if client is None:
            client = self._clients[bookie_id] = SimBookieClient(self, bookie_id)
        return client

    async def close(self) -> None:
        """Fail every pending request; later requests fail at once."""
        self.closed = True
        for future in list(self.pending):
            _fail(future, "*", "pool closed")


__all__ = ["FaultConfig", "SimBookieClient", "SimBookiePool", "SimNetwork"]

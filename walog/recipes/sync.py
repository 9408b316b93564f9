"""The sync replicated state machine: :class:`StateMachine` over the asyncio driver.

The driver and the service's callbacks run on the client's event loop thread; commands are
handed over from user threads in batches (:class:`walog._loop_thread.Handoff`), and each caller
waits on its own ``concurrent.futures.Future``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from walog._loop_thread import Handoff, SyncContext
from walog._sinks import Sink
from walog.log.barrier import DEFAULT_BARRIER_TIMEOUT_S
from walog.log.log_metadata import SnapshotInfo
from walog.log.position import Position
from walog.log.sync import Log
from walog.recipes.machine import AsyncStateMachine
from walog.recipes.policy import Role, SnapshotPolicy
from walog.recipes.reads import Consistency
from walog.recipes.results import command_key
from walog.recipes.service import Service

T = TypeVar("T")


class StateMachine(SyncContext):
    """A node of a replicated state machine over one log (a context manager).

    Same arguments as :class:`walog.recipes.AsyncStateMachine`, with a sync ``walog.Log``.
    ``service`` callbacks run on the client's event loop thread, one at a time: keep them
    quick and never call sync walog APIs from them.

    Raises:
        ValueError: ``node_id`` is empty, or the log is VOLATILE (open it PERSISTENT).

    Attributes:
        async_machine: the underlying :class:`walog.recipes.AsyncStateMachine`.
    """

    def __init__(
        self,
        log: Log,
        service: Service,
        *,
        node_id: str,
        snapshot_policy: SnapshotPolicy | None = None,
        snapshot_dir: str | Path | None = None,
        election: str | None = None,
    ) -> None:
        self._loop = log.loop_thread

        async def build() -> AsyncStateMachine:
            return AsyncStateMachine(
                log.async_log,
                service,
                node_id=node_id,
                snapshot_policy=snapshot_policy,
                snapshot_dir=snapshot_dir,
                election=election,
            )

        self.async_machine = self._loop.run(build())
        self._handoff: Handoff[Any] = Handoff(self._loop, self._submit_into)

    @property
    def role(self) -> Role:
        """The node's role now."""
        return self.async_machine.role

    @property
    def applied_position(self) -> Position | None:
        """Every record before this position is applied (None: nothing yet)."""
        return self.async_machine.applied_position

    @property
    def lag(self) -> float:
        """Seconds between the writing and the applying of the last record applied."""
        return self.async_machine.lag

    def start(self) -> StateMachine:
        """Restore the newest valid snapshot and start following the log; returns self."""
        self._loop.run(self.async_machine.start())
        return self

    def wait_leader(self, timeout: float | None = None) -> None:
        """Block until this node leads.

        Raises:
            TimeoutError: it did not within ``timeout`` seconds.
        """
        machine = self.async_machine
        try:
            self._loop.run(machine.wait_for(lambda: machine.role is Role.LEADER, timeout))
        except TimeoutError:
            raise TimeoutError(
                f"state machine {machine.node_id!r} did not become the leader within {timeout} "
                f"seconds (it is {machine.role.value})"
            ) from None

    def wait_applied(self, position: Position, timeout: float | None = None) -> None:
        """Block until every record before ``position`` is applied here."""
        machine = self.async_machine

        def done() -> bool:
            applied = machine.applied_position
            return applied is not None and applied >= position

        self._loop.run(machine.wait_for(done, timeout))

    def _submit_into(self, item: bytes | tuple[bytes, str, int], sink: Sink[Any]) -> None:
        if isinstance(item, tuple):
            self.async_machine.submit_into(item[0], sink, item[1], item[2])
        else:
            self.async_machine.submit_into(item, sink)

    def submit(
        self, command: bytes, *, client_id: str | None = None, seq: int | None = None
    ) -> concurrent.futures.Future[Any]:
        """Append ``command``; the future gets ``apply``'s result once it is durable and
        applied, or :class:`walog.recipes.NotLeaderError` when this node does not lead.
        With ``client_id`` and ``seq``, a retry of the command is applied once and answered
        with its first result (see ``AsyncStateMachine.submit``)."""
        if not isinstance(command, bytes | bytearray | memoryview):
            raise TypeError(f"a command is bytes, got {type(command).__name__}")
        key = command_key(client_id, seq)
        if key is None:
            return self._handoff.put(bytes(command))
        return self._handoff.put((bytes(command), *key))

    def execute(
        self,
        command: bytes,
        timeout: float | None = None,
        *,
        client_id: str | None = None,
        seq: int | None = None,
    ) -> Any:
        """:meth:`submit` and wait for the result."""
        return self.submit(command, client_id=client_id, seq=seq).result(timeout)

    def read(
        self,
        fn: Callable[[Any], T],
        consistency: Consistency = "linearizable",
        *,
        timeout: float = DEFAULT_BARRIER_TIMEOUT_S,
    ) -> T:
        """Run ``fn`` on the service (the local state) once it is as fresh as
        ``consistency`` asks, and return its result: ``"linearizable"`` (every command
        answered before the call is in the state) or ``"stale"`` (at once); see
        :meth:`walog.recipes.AsyncStateMachine.read`. ``fn`` runs on the client's event
        loop thread, so it sees no half-applied command.

        Raises:
            ValueError: an unknown ``consistency``, or a negative ``timeout``.
            TimeoutError: the node did not get there within ``timeout`` seconds.
        """
        return self._loop.run(self.async_machine.read(fn, consistency, timeout=timeout))

    def snapshot_now(self) -> SnapshotInfo | None:
        """Snapshot now and wait until it is listed (None: a newer one already was)."""
        return self._loop.run(self.async_machine.snapshot_now())

    def close(self) -> None:
        """Stop the node (resigns the lead)."""
        self._loop.run(self.async_machine.close())


__all__ = ["StateMachine"]

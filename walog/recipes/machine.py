"""The replicated state machine driver, on the event loop (:class:`AsyncStateMachine`).

A node is a standby or the leader. A standby tails the log (never fencing) and applies
every record in log order, while it campaigns in the log's election. Once elected it takes
the log over (``open_writer`` fences and recovers the previous leader's ledgers), applies
every record before its own new ledger (*catching up*), and only then serves: a command
is appended, and once its record is acknowledged it is applied and its result returned.

Invariants:

- The state is a function of the log: every record is applied exactly once, in position
  order (:func:`~walog.recipes.policy.is_new` skips any record before the resume point),
  whether it arrives through the tail, the catch-up or the leader's own acknowledgement.
- A leader acknowledges a command only once its record is durable in a ledger that every
  later takeover recovers, after every earlier record (the log writer acknowledges a
  prefix of what was appended), so every later leader applies it too.
- A leader never serves before it applied every record before its own ledger.
- A command whose append failed is never applied by the leader: its node goes back to
  standby and applies it from the log if the takeover kept it.
- The log is PERSISTENT: a VOLATILE log's bookies acknowledge records from their page
  cache, so a command answered on such an acknowledgement could be lost by a crash that
  the leader's state (and any snapshot taken of it) survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from walog import mutations
from walog._loggers import get_logger
from walog._tasks import cancel_and_wait
from walog.errors import (
    DataLossError,
    LedgerFencedError,
    RecordTooLargeError,
    SequenceError,
    WalogError,
)
from walog.log.async_log import AsyncLog
from walog.log.barrier import DEFAULT_BARRIER_TIMEOUT_S
from walog.log.log_metadata import SnapshotInfo
from walog.log.position import Position, Record
from walog.log.reader import AsyncLogReader
from walog.log.writer import AsyncLogWriter
from walog.metadata.election import Leadership, elect
from walog.recipes.commands import CommandPipeline, ResultSink
from walog.recipes.keeper import RESTORE_ATTEMPTS, SnapshotChurnError, SnapshotKeeper
from walog.recipes.policy import Role, SnapshotPolicy, caught_up, is_new, next_after
from walog.recipes.reads import Consistency, read_state
from walog.recipes.results import Results, command_key
from walog.recipes.service import CommandInDoubtError, NotLeaderError, Service
from walog.wire.durability import Durability

log = get_logger(__name__)
T = TypeVar("T")

CATCH_UP_POLL_SECONDS = 0.05
"""While catching up, how often the new leader checks whether its reader reached its ledger."""
DRAIN_SECONDS = 30.0
"""On losing the lead, how long acknowledgements of commands in flight are awaited."""
LOG_START = Position(0, 0, 0)
"""Before the first record any log can hold (ledger ids start at 1)."""
RETRY_SECONDS = 1.0
"""Pause before a node starts over after an unexpected failure of its role."""


class _SteppedDown(WalogError):
    """The leader's term ended (its election record was lost)."""


def _require_persistent(log: AsyncLog) -> None:
    """Refuse a log whose bookies acknowledge records before they are durable.

    Raises:
        ValueError: the log was opened with ``durability=Durability.VOLATILE``.
    """
    volatile = log.ledger_options.durability is Durability.VOLATILE
    if volatile and not mutations.enabled("statemachine_accepts_volatile"):
        raise ValueError(
            f"log {log.name!r} is VOLATILE: its bookies acknowledge records from their page "
            "cache, so a command the state machine answered could be lost by a crash; open "
            "the log with durability=Durability.PERSISTENT (the default) for a state machine"
        )


class AsyncStateMachine:
    """A node of a replicated state machine over one log (the asyncio API).

    Args:
        log: the log (``await client.open_log(name, ...)``); its roll policy decides how
            often ledgers close, and so how finely snapshots can truncate it.
        service: the state (see :class:`Service`).
        node_id: this node's name in the election and in snapshot records.
        snapshot_policy: when to snapshot and how many to keep (default: never).
        snapshot_dir: keep snapshots as files here instead of in ledgers of their own.
        election: the election's name (default ``statemachine-<log>``).

    Raises:
        ValueError: ``node_id`` is empty, or the log is VOLATILE (open it PERSISTENT).

    Attributes:
        role: :class:`Role` now.
        epoch: the log's epoch of this node's last takeover (0 before any).
    """

    def __init__(
        self,
        log: AsyncLog,
        service: Service,
        *,
        node_id: str,
        snapshot_policy: SnapshotPolicy | None = None,
        snapshot_dir: str | Path | None = None,
        election: str | None = None,
    ) -> None:
        if not node_id:
            raise ValueError("node_id is empty")
        _require_persistent(log)
        self._log = log
        self._client = log.client
        self._service = service
        self.node_id = node_id
        self.policy = snapshot_policy or SnapshotPolicy()
        self._keeper = SnapshotKeeper(log, service, node_id, self.policy, snapshot_dir)
        self.election = election or f"statemachine-{log.name}"
        self.role = Role.STANDBY
        self.epoch = 0
        self._resume: Position | None = None
        self._lag = 0.0
        self._writer: AsyncLogWriter | None = None
        self._commands = CommandPipeline(self._apply, self._notify)
        self._results = Results()
        self._writer_failed = asyncio.Event()
        self._writer_error: BaseException | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._snapshot_task: asyncio.Task[None] | None = None

    # -- what a caller sees ----------------------------------------------------------------

    @property
    def applied_position(self) -> Position | None:
        """Every record before this position is applied (None: nothing yet)."""
        return self._resume

    @property
    def lag(self) -> float:
        """Seconds between the writing and the applying of the last record applied from
        the log (0 on the leader, which applies its own records as they are acked)."""
        return 0.0 if self.role is Role.LEADER else self._lag

    async def start(self) -> None:
        """Restore the newest valid snapshot, delete snapshot ledgers a crash left unlisted,
        then run (standby, campaign, lead) in a task.

        Raises:
            DataLossError: the log was truncated and no snapshot covers what is gone.
        """
        if self._task is not None:
            raise RuntimeError("state machine already started")
        await self._restore_newest(None)
        await self._check_replayable()  # restores again when the log was truncated meanwhile
        await self._keeper.collect_unlisted()
        self._task = asyncio.create_task(self._run(), name=f"statemachine-{self.node_id}")
        self._task.add_done_callback(self._stopped)

    def _stopped(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("state machine stopped", node=self.node_id, error=repr(task.exception()))
            self.role = Role.STOPPED
            self._notify()

    async def wait_for(self, check: Callable[[], bool], timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until ``check()`` (e.g. ``lambda: sm.role is Role.LEADER``) holds.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
        """
        try:
            async with asyncio.timeout(timeout):
                while not check():
                    if self._task is not None and self._task.done():
                        self._task.result()  # raises why the node stopped
                        raise NotLeaderError(f"state machine {self.node_id} stopped")
                    await self._changed.wait()
        except TimeoutError as exc:
            raise TimeoutError(
                f"state machine {self.node_id!r} ({self.role.value}): what was awaited did "
                f"not happen within {timeout} seconds"
            ) from exc

    def submit_into(
        self,
        command: bytes,
        sink: ResultSink,
        client_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        """Append ``command``; ``sink`` gets ``apply``'s result once its record is durable
        and applied (loop thread; the sync facade hands its own futures in). With
        ``client_id`` and ``seq``, a command the log holds already is not appended again:
        ``sink`` gets its first result (walog.recipes.results).

        Raises:
            NotLeaderError: this node does not serve commands now.
            TypeError, ValueError: ``command`` is not bytes-like or too large for an entry;
                ``client_id`` without ``seq`` or the other way round.
            SequenceError: ``seq`` is skipped or too old for ``client_id``.
        """
        writer = self._writer
        key = command_key(client_id, seq)
        if self.role is not Role.LEADER or writer is None:
            raise NotLeaderError(f"node {self.node_id} is {self.role.value}, not the leader")
        try:
            if key is None:
                ack = writer.append_nowait(command)
            else:
                ack = asyncio.get_running_loop().create_future()
                writer.append_as(key[0], key[1], command, ack)
        except (RecordTooLargeError, SequenceError):
            raise  # this command alone is refused: the writer goes on
        except WalogError as exc:
            # A failure the writer already knew (fenced, its session presumed expired while
            # nothing was in flight, closed): it appends nothing more, so the term is over,
            # even while the election record lasts.
            self._writer_error = exc
            self._writer_failed.set()
            raise
        self._commands.add(ack, bytes(command), sink, key)

    async def submit(
        self, command: bytes, *, client_id: str | None = None, seq: int | None = None
    ) -> Any:
        """Append ``command``, wait until it is applied, and return ``apply``'s result.

        With ``client_id`` and ``seq`` (the client's number for this command, increasing),
        the command is appended under the client's producer session: submitted again with
        the same pair (after ``CommandInDoubtError``, ``WriterFencedError`` or a timeout,
        on this leader or the next), it is applied once and answered with its first result.

        Raises:
            NotLeaderError: this node does not lead (ask the leader; see ``role``).
            CommandInDoubtError: the node stopped leading while the command was in flight.
            WriterFencedError: another node took over while the command was in flight;
                it may or may not be in the log (the new leader applies it if it is).
            CommandAppliedError: a retried command was applied, but its result is no
                longer kept.
            SequenceError: ``seq`` is skipped or too old for ``client_id``.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.submit_into(command, future, client_id, seq)
        return await future

    async def read(
        self,
        fn: Callable[[Any], T],
        consistency: Consistency = "linearizable",
        *,
        timeout: float = DEFAULT_BARRIER_TIMEOUT_S,  # noqa: ASYNC109
    ) -> T:
        """Run ``fn`` on the service (the local state) and return its result, on any node.

        ``"linearizable"``: once this node applied every record before the log's read
        barrier, so every command answered (by any leader) before the call is in the
        state (walog.recipes.reads). ``"stale"``: at once, on whatever the node applied.

        Raises:
            ValueError: an unknown ``consistency``, or a negative ``timeout``.
            TimeoutError: the node did not get there within ``timeout`` seconds.
        """
        return await read_state(self._log, self, self._service, fn, consistency, timeout)

    async def snapshot_now(self) -> SnapshotInfo | None:
        """Snapshot the state now (whatever the policy) and wait until it is listed.

        Returns its record, or None when one at least as recent was already listed.
        """
        if self._resume is None:
            return None
        return await self._take_snapshot()

    async def close(self) -> None:
        """Stop: resign the lead, close the writer and readers. Idempotent."""
        task, self._task = self._task, None
        try:
            if task is not None:
                with contextlib.suppress(Exception):
                    await cancel_and_wait(task)
            snap, self._snapshot_task = self._snapshot_task, None
            if snap is not None:
                with contextlib.suppress(Exception):
                    await snap
        finally:
            self._set_role(Role.STOPPED)

    async def __aenter__(self) -> AsyncStateMachine:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- roles -----------------------------------------------------------------------------

    def _set_role(self, role: Role) -> None:
        if role is not self.role:
            log.info("state machine role", node=self.node_id, role=role.value)
        self.role = role
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _run(self) -> None:
        while True:
            try:
                leadership = await self._follow_until_elected()
            except DataLossError:
                raise  # the log lost what this node needs and no snapshot covers it
            except (WalogError, OSError) as exc:
                log.warning("standby failed; starting over", node=self.node_id, error=str(exc))
                await asyncio.sleep(RETRY_SECONDS)
                continue
            pause = 0.0
            try:
                await self._lead(leadership)
            except (_SteppedDown, LedgerFencedError) as exc:
                log.warning("leadership ended", node=self.node_id, error=str(exc))
            except DataLossError:
                raise
            except (WalogError, OSError) as exc:
                # Could not take over or serve (bookies, metadata): let another node try.
                log.warning("leading failed", node=self.node_id, error=str(exc))
                pause = RETRY_SECONDS
            finally:
                await self._step_down(leadership)
            await asyncio.sleep(pause)

    async def _check_replayable(self) -> None:
        """A node that applied nothing yet replays the log from its start: when records
        were truncated from it (reading from "earliest" would silently skip them), it
        restores the newest snapshot, which covers them (another node may have taken it
        since this node started), and refuses when there is none."""
        if self._resume is not None:
            return
        meta = await self._log.metadata()
        gone = meta.truncated_through
        if gone is not None and not await self._restore_newest(None):
            raise DataLossError(
                f"log {self._log.name!r} was truncated (it now starts at "
                f"{meta.existing_at_or_after(gone)}) and no valid snapshot covers what went: "
                "this node cannot rebuild the state"
            )

    async def _open_reader(self) -> AsyncLogReader:
        await self._check_replayable()
        return await self._reader_at_resume()

    async def _reopen_past_truncation(self, reader: AsyncLogReader) -> AsyncLogReader:
        """The log was truncated past our resume point (other nodes snapshot and truncate):
        restore a newer snapshot, which covers what is gone, and read on from it.

        Raises:
            DataLossError: no valid snapshot covers what was truncated.
        """
        await reader.close()
        await self._restore_past_truncation(
            DataLossError(f"log {self._log.name!r} was truncated past {self._resume}")
        )
        return await self._reader_at_resume()

    async def _reader_at_resume(self) -> AsyncLogReader:
        """A reader at the resume point. When the log was truncated past it, a newer
        snapshot is restored and the reader opened at its position, again as long as
        truncation keeps overtaking the restores (another node may snapshot and truncate
        while this one restores); each restore moves the resume point forward.

        Raises:
            DataLossError: no valid snapshot covers what was truncated.
            SnapshotChurnError: truncation overtook :data:`RESTORE_ATTEMPTS` restores in a
                row (a :class:`WalogError`: the node starts over).
        """
        for _ in range(RESTORE_ATTEMPTS):
            try:
                # A node that applied nothing reads from the log's very first position, not
                # from "earliest": if a truncation came after this node looked (another
                # node snapshotted), that is a DataLossError and a restore, never a silent
                # start past the truncated records.
                return await self._log.open_reader(self._resume or LOG_START)
            except DataLossError as exc:
                await self._restore_past_truncation(exc)
        raise SnapshotChurnError(
            f"log {self._log.name!r}: truncated past the restored snapshot "
            f"{RESTORE_ATTEMPTS} times in a row"
        )

    async def _restore_past_truncation(self, lost: DataLossError) -> None:
        """Restore a snapshot newer than the resume point, or raise ``lost`` (what the
        truncation took) when there is none."""
        if not await self._restore_newest(self._resume):
            raise DataLossError(
                f"{lost}; no valid snapshot covers it: this node cannot rebuild the state"
            ) from lost

    async def _follow_until_elected(self) -> Leadership:
        self._set_role(Role.STANDBY)
        campaign = asyncio.create_task(elect(self._client.ctx.store, self.election, self.node_id))
        reader: AsyncLogReader | None = None
        try:
            reader = await self._open_reader()
            while not campaign.done():
                read = asyncio.create_task(reader.read_available())
                try:
                    await asyncio.wait({read, campaign}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not read.done():
                        await cancel_and_wait(read)
                if read.done() and not read.cancelled():
                    try:
                        records = read.result()
                    except DataLossError:
                        reader = await self._reopen_past_truncation(reader)
                        continue
                    self._apply_batch(records, reader)
            return campaign.result()
        except BaseException:
            campaign.cancel()
            with contextlib.suppress(BaseException):
                leadership = await campaign
                await leadership.resign()
            raise
        finally:
            if reader is not None:
                await reader.close()

    async def _lead(self, leadership: Leadership) -> None:
        self._set_role(Role.CATCHING_UP)
        # Fences the previous leader's ledgers; each command names its client's session.
        writer = await self._log.open_writer(sessions=True)
        self._writer = writer
        target = Position(writer.ledger_id, 0, 0)
        if not caught_up(self._resume, None, target):
            reader = await self._open_reader()
            try:
                while not caught_up(self._resume, reader.position, target):
                    if leadership.lost.is_set():
                        raise _SteppedDown(f"node {self.node_id} lost the lead while catching up")
                    try:
                        records = await reader.read_available(CATCH_UP_POLL_SECONDS)
                    except DataLossError:
                        reader = await self._reopen_past_truncation(reader)
                        continue
                    self._apply_batch(records, reader)
            finally:
                await reader.close()
        # Every record before the new ledger is applied; after it only ours can come.
        if self._resume is None or self._resume < target:
            self._resume = target
        self.epoch = writer.epoch
        self._lag = 0.0
        self._set_role(Role.LEADER)
        log.info("leading", node=self.node_id, epoch=writer.epoch, ledger=writer.ledger_id)
        self._writer_failed.clear()
        applier = asyncio.create_task(self._commands.run())
        lost = asyncio.create_task(leadership.wait_lost())
        failed = asyncio.create_task(self._writer_failed.wait())
        try:
            await asyncio.wait({applier, lost, failed}, return_when=asyncio.FIRST_COMPLETED)
            if applier.done():
                applier.result()  # raises the append failure (fenced) that ended the term
            if failed.done():
                raise _SteppedDown(
                    f"node {self.node_id}: its log writer stopped ({self._writer_error})"
                )
            raise _SteppedDown(f"node {self.node_id} lost its election record")
        finally:
            lost.cancel()
            failed.cancel()
            self._set_role(Role.STANDBY)  # no new command from here on
            if not applier.done():
                # Acknowledged commands are applied and answered; those that fail are not.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._commands.drain(), DRAIN_SECONDS)
                with contextlib.suppress(WalogError):
                    await cancel_and_wait(applier)

    async def _step_down(self, leadership: Leadership) -> None:
        writer, self._writer = self._writer, None
        self._commands.fail_all(
            CommandInDoubtError(
                f"node {self.node_id} stopped leading before the command was acknowledged: "
                "it may or may not be in the log (every node applies it if it is)"
            )
        )
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.close()
        with contextlib.suppress(Exception):
            await leadership.resign()
        if self.role is not Role.STOPPED:
            self._set_role(Role.STANDBY)

    # -- applying --------------------------------------------------------------------------

    def _apply(self, record: Record) -> tuple[Any, BaseException | None]:
        if not is_new(self._resume, record.position):
            # Already in the state (restored or applied before): a retried command of a
            # client gets its first result.
            return self._results.first(record)
        result: Any = None
        error: BaseException | None = None
        try:
            result = self._service.apply(record)
        except Exception as exc:
            # Deterministic services fail the same way on every node: the record stays
            # applied (as a failure) and its submitter gets the exception.
            log.warning(
                "apply raised", node=self.node_id, position=str(record.position), error=repr(exc)
            )
            error = exc
        self._results.applied(record, result, error)
        self._resume = next_after(record.position)
        self._keeper.applied(len(record.data))
        self._maybe_snapshot()
        return result, error

    def _apply_batch(self, records: list[Record], reader: AsyncLogReader) -> None:
        for record in records:
            self._apply(record)
        if records:
            self._lag = max(0.0, time.time() - records[-1].timestamp)
        here = reader.position
        if here is not None and self._resume is not None and here > self._resume:
            self._resume = here  # entry-aligned: survives truncation of the ledger's end
        self._notify()

    # -- snapshots -------------------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        if not self.policy.takes_on(self.role) or not self._keeper.due():
            return
        if self._snapshot_task is None or self._snapshot_task.done():
            self._snapshot_task = asyncio.create_task(self._snapshot_quietly())

    async def _snapshot_quietly(self) -> None:
        try:
            await self._take_snapshot()
        except Exception as exc:
            # The next one is due by the same policy; the log keeps everything meanwhile.
            log.warning("snapshot failed", node=self.node_id, error=repr(exc))

    async def _take_snapshot(self) -> SnapshotInfo | None:
        assert self._resume is not None
        return await self._keeper.take(self._resume)

    async def _restore_newest(self, newer_than: Position | None) -> bool:
        position = await self._keeper.restore_newest(newer_than)
        if position is None:
            return False
        self._resume = position
        self._notify()
        return True


__all__ = ["AsyncStateMachine"]

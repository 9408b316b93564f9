"""The bookie's real storage engine in simulated worlds.

:class:`EngineBookie` stands where :class:`tests.sim.bookie.SimBookie` (an in-memory model)
stands, but answers every request with :class:`bookie.storage.engine.BookieCore`: the
journal and its group commit, the write cache, checkpoints, replay, the index, compaction
and the ledger collector (bookie/gc.py) all run, unchanged, on

- a :class:`~tests.sim.disk.SimDisk` (only what was synced survives a crash; ENOSPC, EIO),
- an in-memory LMDB (tests/sim/lmdb.py),
- :class:`SimWorkers` and :class:`SimJournalRunner`: the storage threads and the journal's
  writer thread as jobs on the virtual-time event loop, each at its own random delay.

A crash (the nemesis's, or one planned at the n-th next file-system call, which may fall
inside a checkpoint or a replay) kills the engine's incarnation: every later call of it
fails, its disk goes back to what was synced, and a restart opens a new engine on what is
left (replaying the journal).

Two rules of the bookie itself are checked here (on every reopen and at the end):

- ``bookie_forgot_fence``: a ledger the bookie answered a fence for stays fenced, also
  after its collector deleted it;
- ``bookie_lost_entry``: an entry the bookie acknowledged as PERSISTENT (a writer's add or a
  recovery's write-back) stays readable on it, unless the ledger was deleted by its
  collector (the metadata says it was deleted).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import errno
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import crc32c

from bookie.gc import LedgerCollector
from bookie.storage.compaction import CompactionPolicy
from bookie.storage.config import StorageConfig
from bookie.storage.engine import BookieCore
from bookie.storage.environment import StorageEnv
from bookie.storage.files import write_all
from bookie.storage.journal_files import FRAME, StorageIOError
from bookie.storage.journal_writer import Completion, JournalWriter
from tests.sim.disk import SimCrash, SimDisk, SimFiles
from tests.sim.lmdb import SimOpener
from tests.sim.loop import Trace
from walog.metadata.store import MetadataStore
from walog.transport.base import (
    AddReply,
    FenceReply,
    ForceReply,
    ReadLacReply,
    ReadReply,
    StoredEntry,
)
from walog.wire.durability import Durability
from walog.wire.status import Status

_T = TypeVar("_T")
Violate = Callable[[str, str], None]

JOB_DELAY_S = (2e-5, 4e-4)
"""How long a storage thread usually takes to start and run a job (virtual seconds)."""
CRASH_CHECKS = 0.05
"""Share of checkpoints after which :meth:`EngineBookie.crash_check` looks at what a crash
would leave (every first checkpoint after a failed one is looked at)."""
SLOW_JOB_S = (1e-3, 3e-2)
"""How long a slow job (a busy disk) takes; how often jobs are slow is drawn per schedule."""
SYNC_DELAY_S = (5e-5, 1e-3)
"""How long a journal write, and then its sync, take."""


class SimWorkers:
    """:class:`bookie.storage.environment.Workers` on the virtual clock: jobs run in submission
    order, each a short random delay after the one before, whether or not their caller still
    waits (a thread runs what it was handed)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, rng: random.Random, slow: float = 0.05
    ) -> None:
        self._loop = loop
        self._rng = rng
        self._slow = slow
        self._tail = 0.0

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """See :meth:`bookie.storage.environment.Workers.run`."""
        loop = self._loop
        future: asyncio.Future[_T] = loop.create_future()
        took = self._rng.uniform(*(SLOW_JOB_S if self._rng.random() < self._slow else JOB_DELAY_S))
        self._tail = max(loop.time(), self._tail) + took
        loop.call_at(self._tail, _execute, future, fn, args)
        return await future

    def shutdown(self) -> None:
        """See :meth:`bookie.storage.environment.Workers.shutdown` (queued jobs still run)."""


def _execute(future: asyncio.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        result = fn(*args)
    except BaseException as exc:  # SimCrash too: the caller's await raises it
        if not future.done():
            future.set_exception(exc)
        return
    if not future.done():
        future.set_result(result)


@dataclasses.dataclass
class _Job:
    fd: int
    seed: int
    parts: Sequence[bytes]
    sync: bool

    @property
    def size(self) -> int:
        return FRAME.size + sum(len(p) for p in self.parts) if self.parts else 0


class _SimWriter:
    """The journal writer's interface (bookie/storage/journal_writer.py) for
    :class:`SimJournalRunner`."""

    def __init__(self, runner: SimJournalRunner) -> None:
        self._runner = runner

    def submit(self, fd: int, seed: int, parts: Sequence[bytes], sync: bool, /) -> None:
        self._runner.queue.append(_Job(fd, seed, parts, sync))

    def wake(self) -> None:
        self._runner.wake()

    def run(self) -> None:
        """Not a thread here: the runner's steps are loop callbacks."""

    def fileno(self) -> int:
        return -1

    def collect(self) -> list[Completion]:
        done, self._runner.done = self._runner.done, []
        return done

    def stop(self, abandon: bool, /) -> None:
        self._runner.halt(abandon)


class SimJournalRunner:
    """The journal's writer thread as loop callbacks: a group is what is queued when the
    writer looks; it is written at once and synced a random moment later (a crash may fall
    in between), then the journal collects it."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        rng: random.Random,
        files: SimFiles,
        group_max_bytes: int,
    ) -> None:
        self._loop = loop
        self._rng = rng
        self._files = files
        self._group_max_bytes = max(group_max_bytes, 1)
        self.queue: collections.deque[_Job] = collections.deque()
        self.done: list[Completion] = []
        self._writer = _SimWriter(self)
        self._collect: Callable[[], None] = lambda: None
        self._busy = False
        self._stopped = False
        self._failed = 0
        self._groups = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def writer(self) -> JournalWriter:
        """See :attr:`bookie.storage.journal_writer.WriterRunner.writer`."""
        return self._writer

    def start(self, loop: asyncio.AbstractEventLoop, collect: Callable[[], None]) -> None:
        """See :meth:`bookie.storage.journal_writer.WriterRunner.start`."""
        self._collect = collect

    async def stop(self, abandon: bool) -> None:
        """See :meth:`bookie.storage.journal_writer.WriterRunner.stop`."""
        self.halt(abandon)
        if not self._files.dead:
            await self._idle.wait()
        self._stopped = True  # the journal collects the rest itself

    def halt(self, abandon: bool) -> None:
        """Drop the queued jobs (``abandon``: failed with ECANCELED) or finish them."""
        if abandon:
            self.done.extend((0, errno.ECANCELED, False, 0.0, 0.0, 0.0) for _ in self.queue)
            self.queue.clear()
            self._loop.call_soon(self._signal)
        self.wake()

    def _signal(self) -> None:
        """Tell the journal that jobs completed (the eventfd of the threaded writer)."""
        if not self._stopped:
            self._collect()

    def wake(self) -> None:
        """Start a group soon unless one is under way."""
        if not self._busy and self.queue:
            self._busy = True
            self._idle.clear()
            self._loop.call_later(self._rng.uniform(*JOB_DELAY_S), self._step)

    def _step(self) -> None:
        if self._files.dead:
            return  # the process died: nothing more is written or completed
        group = self._take_group()
        if not group:
            self._busy = False
            self._idle.set()
            return
        error = self._failed
        if not error:
            try:
                data = b"".join(_framed(job) for job in group if job.parts)
                if data:
                    write_all(self._files, group[0].fd, data)
            except OSError as exc:
                error = exc.errno or errno.EIO
            except SimCrash:
                return
        if error:
            self._finish(group, error, False)
            return
        sync = any(job.sync for job in group)
        self._loop.call_later(self._rng.uniform(*SYNC_DELAY_S), self._sync, group, sync)

    def _take_group(self) -> list[_Job]:
        group: list[_Job] = []
        size = 0
        while self.queue and size < self._group_max_bytes:
            if group and self.queue[0].fd != group[0].fd:
                break
            job = self.queue.popleft()
            group.append(job)
            size += job.size
        return group

    def _sync(self, group: list[_Job], sync: bool) -> None:
        if self._files.dead:
            return
        error = 0
        if sync:
            try:
                self._files.fdatasync(group[0].fd)
            except OSError as exc:
                error = exc.errno or errno.EIO
            except SimCrash:
                return
        self._finish(group, error, sync and not error)

    def _finish(self, group: list[_Job], error: int, synced: bool) -> None:
        if error:
            self._failed = self._failed or error
        self._groups += 1
        now = self._loop.time()
        self.done.extend((self._groups, error, synced, now, now, now) for _ in group)
        self._loop.call_soon(self._signal)
        self._busy = False
        if self.queue:
            self.wake()
        else:
            self._idle.set()


def _framed(job: _Job) -> bytes:
    crc = job.seed
    for part in job.parts:
        crc = crc32c.crc32c(part, crc)
    return FRAME.pack(job.size - FRAME.size, crc) + b"".join(job.parts)


@dataclasses.dataclass(frozen=True)
class EngineTunables:
    """The storage settings of one schedule's engines (small, so that journal files roll,
    checkpoints run and entry logs fill within a few dozen entries)."""

    journal_file_bytes: int = 4096
    entry_log_file_bytes: int = 2048
    write_cache_bytes: int = 2048
    checkpoint_interval_s: float = 0.2
    compaction_interval_s: float = 0.5
    gc_interval_s: float = 0.5
    keep_unsynced: float = 0.3
    slow_jobs: float = 0.05
    """Share of the storage threads' jobs that are slow (a busy disk)."""

    @classmethod
    def draw(cls, rng: random.Random) -> EngineTunables:
        """Settings drawn from the schedule's seed."""
        return cls(
            journal_file_bytes=rng.choice([600, 2048, 1 << 16]),
            entry_log_file_bytes=rng.choice([400, 2048, 1 << 16]),
            write_cache_bytes=rng.choice([300, 2048, 1 << 16]),
            checkpoint_interval_s=rng.choice([0.1, 0.5, 2.0]),
            compaction_interval_s=rng.choice([0.3, 1.5]),
            gc_interval_s=rng.choice([0.5, 2.0]),
            keep_unsynced=rng.choice([0.0, 0.3, 0.9]),
            slow_jobs=rng.choice([0.02, 0.1, 0.3]),
        )

    def storage_config(self, root: Path) -> StorageConfig:
        """The engine's :class:`StorageConfig` under ``root``."""
        return StorageConfig(
            data_dir=root / "data",
            journal_dir=root / "journal",
            journal_file_bytes=self.journal_file_bytes,
            entry_log_file_bytes=self.entry_log_file_bytes,
            write_cache_bytes=self.write_cache_bytes,
            checkpoint_interval_s=self.checkpoint_interval_s,
            # Thresholds above the defaults: logs here hold few entries, so compaction
            # finds work as soon as some of their ledgers are deleted.
            compaction=CompactionPolicy(
                minor_compaction_threshold=0.5,
                minor_compaction_interval_s=self.compaction_interval_s,
                major_compaction_threshold=0.9,
                major_compaction_interval_s=self.compaction_interval_s * 3,
                compaction_rate_bytes=1 << 20,
            ),
        )


class EngineBookie:
    """One bookie running :class:`BookieCore` on a simulated disk (see the module's
    description); the same interface as :class:`tests.sim.bookie.SimBookie`.

    Args:
        bookie_id: its id.
        loop: the simulation's loop.
        trace: where state changes are logged.
        tunables: its storage settings.
        violate: where broken bookie rules are reported.
        session: makes the collector's metadata session (None: no collector).
    """

    def __init__(
        self,
        bookie_id: str,
        loop: asyncio.AbstractEventLoop,
        rng: random.Random,
        trace: Trace,
        tunables: EngineTunables,
        violate: Violate,
        session: Callable[[], MetadataStore] | None = None,
    ) -> None:
        self.bookie_id = bookie_id
        self.trace = trace
        self.up = False
        self.paused = False
        self.crashes = 0
        self.disk = SimDisk(rng, keep_unsynced=tunables.keep_unsynced)
        self.config = tunables.storage_config(Path("/bookies") / bookie_id)
        self.core: BookieCore | None = None
        self.on_planned_crash: Callable[[], None] = lambda: None
        """Told when a crash planned on the disk killed the engine (the world crashes the
        bookie then)."""
        self._loop = loop
        self._rng = rng
        self._tunables = tunables
        self._violate = violate
        self._session = session
        self._files: SimFiles | None = None
        self._opening: asyncio.Task[None] | None = None
        self._tasks: dict[asyncio.Task[Any], None] = {}
        self.last_write: dict[int, float] = {}
        self.acked: dict[int, dict[int, bytes]] = {}
        """Entries this bookie acknowledged as PERSISTENT, by ledger (what it must keep)."""
        self.fenced: set[int] = set()
        """Ledgers this bookie answered a fence for."""
        self._after_failure = False
        self._openings: dict[int, int] = {}  # engine incarnation -> 1, 2, ... in order
        self._heard: dict[str, int] = {}  # client -> latest opening it heard an answer of
        self._volatile: dict[int, set[int]] = {}  # VOLATILE entries acknowledged since opening
        self._lost: dict[int, dict[int, int]] = {}  # ledger -> entry -> opening that lost it
        self.collected: set[int] = set()
        """Ledgers its collector deleted (their metadata was gone)."""

    @property
    def opening(self) -> bool:
        """True while a new engine is being opened (replaying)."""
        return self._opening is not None

    @property
    def failed(self) -> bool:
        """True while the engine's journal has failed: it refuses every write until a
        restart (a bookie's health check reports it; its operator restarts it)."""
        return self.core is not None and self.core.journal.failed is not None

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, on_up: Callable[[], None] = lambda: None) -> None:
        """Open a new engine on the disk; ``on_up`` once it serves. A failed open (a disk
        that fails) leaves the bookie down."""
        if self._opening is not None or self.up:
            return
        self._opening = self._loop.create_task(self._open(on_up))

    # -- incarnations (the invariant volatile_ack_after_loss) ------------------------------

    def heard_by(self, client: str, answer: asyncio.Future[AddReply]) -> None:
        """An add answer reached ``client``: note which opening of the engine it came from."""
        if answer.cancelled() or answer.exception() is not None:
            return
        opened = self._openings.get(answer.result().incarnation, 0)
        if opened > self._heard.get(client, 0):
            self._heard[client] = opened

    def lost_unnoticed(self, client: str, ledger_id: int, entry_id: int) -> bool:
        """Whether this bookie may have lost an entry it acknowledged (VOLATILE, unsynced)
        in a crash that no answer of a later opening told ``client`` about yet."""
        if self.core is None:  # down: what it kept is known once it opens again
            return entry_id in self._volatile.get(ledger_id, ())
        lost_by = self._lost.get(ledger_id, {}).get(entry_id)
        return lost_by is not None and self._heard.get(client, 0) <= lost_by

    def _note_losses(self, core: BookieCore) -> None:
        """After an opening: the VOLATILE entries acknowledged before that it no longer has."""
        with self.disk.inspecting():
            for ledger_id, entries in self._volatile.items():
                for entry_id in sorted(entries):
                    if self._peek(core, ledger_id, entry_id) is None:
                        self._lost.setdefault(ledger_id, {})[entry_id] = len(self._openings) - 1
        self._volatile.clear()

    def _env(self, files: SimFiles) -> StorageEnv:
        return StorageEnv(
            files=files,
            open_index=SimOpener(files),
            workers=lambda _threads, _name: SimWorkers(
                self._loop, self._rng, self._tunables.slow_jobs
            ),
            journal_runner=lambda group_bytes, _wait: SimJournalRunner(
                self._loop, self._rng, files, group_bytes
            ),
        )

    async def _open(self, on_up: Callable[[], None]) -> None:
        files = self._files = SimFiles(self.disk, self._planned_crash)
        try:
            core = await BookieCore.open(self.config, self._env(files))
        except StorageIOError as exc:
            self.trace.log(f"{self.bookie_id} OPEN FAILED {exc}")
            return
        except SimCrash:
            return
        finally:
            self._opening = None
        if files.dead:
            return
        self.core = core
        self._openings[core.incarnation] = len(self._openings) + 1
        self._note_losses(core)
        self.check_rules("reopened")
        core.checkpoints.failure_listeners.append(self._checkpoint_failed)
        core.checkpoints.listeners.append(self._checkpointed)
        self.up = True
        self.trace.log(f"{self.bookie_id} UP (replayed {core.stats.replayed_records} records)")
        if self._session is not None:
            self._spawn(self._collect(core))
        on_up()

    def _planned_crash(self) -> None:
        self.up = False
        self.trace.log(f"{self.bookie_id} PLANNED CRASH (disk call {self.disk.calls})")
        self._loop.call_soon(self.on_planned_crash)

    def crash(self) -> None:
        """The process dies: requests in flight get no answer, the disk keeps what was
        synced."""
        self.up = False
        self.paused = False
        self.crashes += 1
        if self._files is not None:
            self._files.dead = True
        self.disk.crash()
        self.core = None
        if self._opening is not None:
            self._opening.cancel()
            self._opening = None
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()
        self.trace.log(f"{self.bookie_id} CRASH")

    def restart(self, on_up: Callable[[], None] = lambda: None) -> None:
        """Start again on what the disk kept."""
        self.trace.log(f"{self.bookie_id} RESTART")
        self.start(on_up)

    def _spawn(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        task = self._loop.create_task(coro)
        self._tasks[task] = None
        task.add_done_callback(lambda t: self._tasks.pop(t, None))
        return task

    async def _collect(self, core: BookieCore) -> None:
        """The bookie's ledger collector (bookie/gc.py) with its own metadata session."""
        assert self._session is not None
        collector = LedgerCollector(
            _Collectable(self, core),
            self._session(),
            self.last_write,
            interval=self._tunables.gc_interval_s,
            grace=self._tunables.gc_interval_s,
            clock=self._loop.time,
        )
        await collector.run(asyncio.Event())

    # -- the bookie's own rules -----------------------------------------------------------

    def check_rules(self, when: str) -> None:
        """``bookie_forgot_fence`` and ``bookie_lost_entry`` (see the module's description)
        against what the engine holds now."""
        if self.core is not None:
            with self.disk.inspecting():
                self._check(self.core, when, self.fenced, self.acked)

    def _check(
        self,
        core: BookieCore,
        when: str,
        fenced: set[int],
        acked: dict[int, dict[int, bytes]],
    ) -> None:
        for ledger_id in sorted(fenced):  # a deleted ledger too: fences last for good
            if not core.is_fenced(ledger_id):
                self._violate(
                    "bookie_forgot_fence",
                    f"{self.bookie_id} ({when}) answered a fence of L{ledger_id} and no "
                    "longer has it fenced",
                )
        for ledger_id, entries in sorted(acked.items()):
            if ledger_id in self.collected:
                continue
            for entry_id, data in sorted(entries.items()):
                held = self._peek(core, ledger_id, entry_id)
                if held is None or held.data != data:
                    self._violate(
                        "bookie_lost_entry",
                        f"{self.bookie_id} ({when}) acknowledged L{ledger_id} e{entry_id} "
                        f"and now holds {None if held is None else held.data!r}",
                    )

    def crash_check(self, why: str) -> None:
        """Open a second engine on what a crash now would leave of the disk (a copy: the
        bookie goes on) and check the bookie's rules against it, for what was answered up
        to now. Finds a lost record without waiting for a crash to fall in its window."""
        if self.core is None or self._files is None or self._files.dead:
            return
        copy = self.disk.survivor_copy()
        fenced = set(self.fenced)
        acked = {ledger_id: dict(entries) for ledger_id, entries in self.acked.items()}
        self._spawn(self._reopen_copy(copy, why, fenced, acked))

    async def _reopen_copy(
        self, copy: SimDisk, why: str, fenced: set[int], acked: dict[int, dict[int, bytes]]
    ) -> None:
        files = SimFiles(copy)
        try:
            core = await BookieCore.open(self.config, self._env(files))
        except StorageIOError as exc:
            self._violate(
                "bookie_cannot_restart",
                f"{self.bookie_id}: what a crash {why} would leave does not open: {exc}",
            )
            return
        try:
            with copy.inspecting():
                self._check(core, f"crash {why}", fenced, acked)
        finally:
            await core.abandon()

    def _checkpoint_failed(self) -> None:
        self._after_failure = True

    def _checkpointed(self, _entries: int) -> None:
        if self._after_failure or self._rng.random() < CRASH_CHECKS:
            self._after_failure = False
            self.crash_check("after a checkpoint")

    def _peek(self, core: BookieCore, ledger_id: int, entry_id: int) -> StoredEntry | None:
        cached = core._cached(ledger_id, entry_id)
        if cached is not None:
            lac, _digest, data = cached
            return StoredEntry(ledger_id, entry_id, lac, bytes(data))
        storage = core._storage
        if storage is None or core._states.get(ledger_id) is None:
            return None
        records, _damaged = storage.read_run(ledger_id, entry_id, entry_id, 1 << 30)
        if not records:
            return None
        return StoredEntry(ledger_id, entry_id, records[0].lac, records[0].data)

    # -- inspection (invariants) ------------------------------------------------------------

    def stored(self, ledger_id: int, entry_id: int) -> StoredEntry | None:
        """The entry as this bookie would serve it now (while down: as it acknowledged it,
        which it must serve again once up)."""
        if self.core is None:
            data = self.acked.get(ledger_id, {}).get(entry_id)
            return None if data is None else StoredEntry(ledger_id, entry_id, -1, data)
        with self.disk.inspecting():
            return self._peek(self.core, ledger_id, entry_id)

    # -- requests ---------------------------------------------------------------------------

    def _serve(self, coro: Coroutine[Any, Any, _T]) -> Awaitable[_T]:
        if self.core is None:  # crashed at this very moment: no answer
            coro.close()
            gone: asyncio.Future[_T] = self._loop.create_future()
            gone.cancel()
            return gone
        return self._spawn(coro)

    def add(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        data: bytes,
        digest: int,
        master_key: bytes,
        recovery: bool,
        durability: Durability,
    ) -> Awaitable[AddReply]:
        """Store one entry."""
        return self._serve(
            self._add(ledger_id, entry_id, lac, data, digest, master_key, recovery, durability)
        )

    async def _add(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        data: bytes,
        digest: int,
        master_key: bytes,
        recovery: bool,
        durability: Durability,
    ) -> AddReply:
        core = self._core()
        status, synced = await core.add(
            ledger_id,
            entry_id,
            lac,
            data,
            digest,
            master_key,
            recovery=recovery,
            durability=durability,
        )
        if status is Status.OK:
            self.last_write[ledger_id] = self._loop.time()
            if durability is Durability.PERSISTENT:
                self.acked.setdefault(ledger_id, {}).setdefault(entry_id, bytes(data))
            else:
                self._volatile.setdefault(ledger_id, set()).add(entry_id)
        return AddReply(status, synced, core.incarnation)

    def _core(self) -> BookieCore:
        if self.core is None:
            raise asyncio.CancelledError
        return self.core

    def send_lac(self, ledger_id: int, lac: int, master_key: bytes) -> None:
        """An explicit LAC from an idle writer."""
        if self.core is not None:
            self.core.update_lac(ledger_id, lac, master_key)

    def force(self, ledger_id: int, master_key: bytes) -> Awaitable[ForceReply]:
        """Sync what the ledger received so far."""

        async def force() -> ForceReply:
            core = self._core()
            status, synced = await core.force(ledger_id, master_key)
            return ForceReply(status, synced, core.incarnation)

        return self._serve(force())

    def fence(self, ledger_id: int, master_key: bytes) -> Awaitable[FenceReply]:
        """Fence the ledger."""
        return self._serve(self._fence(ledger_id, master_key))

    async def _fence(self, ledger_id: int, master_key: bytes) -> FenceReply:
        status, lac, last = await self._core().fence(ledger_id, master_key)
        if status is Status.OK:
            self.fenced.add(ledger_id)
        return FenceReply(status, lac, last)

    def read(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_entry_id: int,
        fence: bool,
        master_key: bytes,
        previous_lac: int,
        long_poll_timeout: float,
    ) -> Awaitable[ReadReply]:
        """A range read, fencing first or long-polling on the LAC (as BookieService.Read)."""
        return self._serve(
            self._read(
                ledger_id,
                first_entry_id,
                last_entry_id,
                fence,
                master_key,
                previous_lac,
                long_poll_timeout,
            )
        )

    async def _read(
        self,
        ledger_id: int,
        first: int,
        last: int,
        fence: bool,
        master_key: bytes,
        previous_lac: int,
        long_poll_timeout: float,
    ) -> ReadReply:
        core = self._core()
        if fence:
            fenced = await self._fence(ledger_id, master_key)
            if fenced.status is not Status.OK:
                return ReadReply(fenced.status, [], core.lac(ledger_id), True)
        if long_poll_timeout > 0:
            await core.wait_lac(ledger_id, previous_lac, long_poll_timeout)
        status, records = await core.read(ledger_id, first, last)
        if long_poll_timeout > 0 and status is Status.NO_SUCH_ENTRY:
            status = Status.OK
        entries = [StoredEntry(ledger_id, r.entry_id, r.lac, bytes(r.data)) for r in records]
        return ReadReply(status, entries, core.lac(ledger_id), core.is_fenced(ledger_id))

    def read_lac(self, ledger_id: int) -> Awaitable[ReadLacReply]:
        """The LAC and the last stored entry (as BookieService.ReadLac)."""

        async def read_lac() -> ReadLacReply:
            core = self._core()
            lac, last = core.lac(ledger_id), core.last_entry_id(ledger_id)
            status, records = await core.read(ledger_id, max(last, 0), max(last, 0))
            if last < 0:
                return ReadLacReply(status, lac, -1)
            entry = None
            if status is Status.OK and records:
                r = records[0]
                entry = StoredEntry(ledger_id, r.entry_id, r.lac, bytes(r.data))
            return ReadLacReply(Status.OK, lac, last, entry)

        return self._serve(read_lac())


class _Collectable:
    """The collector's view of an engine: its ledgers, and deletions recorded as such."""

    def __init__(self, bookie: EngineBookie, core: BookieCore) -> None:
        self._bookie = bookie
        self._core = core

    def ledgers(self) -> list[int]:
        return self._core.ledgers()

    async def delete_ledgers(self, ids: list[int]) -> None:
        self._bookie.collected.update(ids)
        self._bookie.trace.log(f"{self._bookie.bookie_id} GC deleted {ids}")
        await self._core.delete_ledgers(ids)


__all__ = ["EngineBookie", "EngineTunables", "SimJournalRunner", "SimWorkers"]

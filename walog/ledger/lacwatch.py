"""The standing LAC watches behind a tailing reader.

A tailer used to send one long poll per LAC it learnt: a new RPC each time, and the news
that arrived between two polls waited for the next one. :class:`LacWatch` instead keeps
watches open (:meth:`walog.transport.base.BookieClient.watch_lac`) on bookies of the
ledger: each answers every time its LAC moves, bringing the newly confirmed entries along,
and sends a heartbeat when nothing happens. It watches ``Qw - Qa + 1`` bookies of the next
entry's write set: as many as the writer can do without, plus one, so a bookie slow enough
for the writer to leave it out of its ack quorums (a long pause, a busy disk) cannot hold
the tailer back either; the first answer to carry a LAC wins (BookKeeper's parallel
``readLastAddConfirmedAndEntry`` makes the same trade). Waiters of :meth:`LacWatch.wait`
are woken on every answer.

One watch *leads*: its bookie answers every move of the LAC. The others are *backups*
whose bookies space their answers :data:`BACKUP_INTERVAL_S` apart, so a tailer that keeps
up with a busy writer costs one answer per entry, not one per watched bookie (on a
two-core machine running three bookies, the second answer per record was ~9 % of the
tail path's CPU). A backup that tells a LAC the lead has not told within
:data:`BACKUP_INTERVAL_S` takes the lead: a bookie too slow or frozen to keep up holds the
tailer back by a few tens of milliseconds at most, and only once.

The watches run while someone waits: they start with the first wait and end on their own
once nobody has waited for :data:`WATCH_IDLE_S`. A watch that fails, or stays silent past
its heartbeat, hands over to another bookie of the ensemble (the least failed one, after a
pause when that is the same bookie again); a change of the ledger's ensemble moves the
watches to the new ensemble at once (:meth:`LacWatch.retarget`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from walog._loggers import get_logger
from walog._tasks import cancel_and_wait
from walog.errors import BookieError, WalogError
from walog.transport.base import BookiePool, ReadReply
from walog.wire.status import Status

log = get_logger(__name__)

WATCH_HEARTBEAT_S = 2.0
"""A watched bookie without news sends its LAC this often (its silence is then a failure)."""
WATCH_IDLE_S = 30.0
"""Watches nobody has waited on for this long are closed (the next wait opens them again)."""
BACKUP_INTERVAL_S = 0.02
"""A backup watch's answers with news come at least this far apart; a backup that tells a
LAC the lead has not told this long after takes the lead."""
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
"""Pauses after consecutive failed watches of one bookie, in turn."""
_REFUSED = frozenset({Status.BAD_REQUEST, Status.UNAUTHORIZED})
"""Answers that carry no LAC: the watch counts them as a failure of that bookie."""

Target = Callable[[], tuple[Sequence[str], int, int, int]]
"""The reader's current choice: (bookies to watch, in order of preference; how many of them
to watch at once; LAC to start after; entries to bring along with each answer)."""


class LacWatch:
    """Waiters for one ledger's LAC, fed by standing watches on some of its bookies.

    Args:
        pool: the client's bookie connections.
        ledger_id: the watched ledger.
        target: called before each (re)start: which bookies, from which LAC, how many entries.
        on_reply: gets every answer and the bookie that sent it (on the event loop) before
            the waiters are woken.
    """

    def __init__(
        self,
        pool: BookiePool,
        ledger_id: int,
        target: Target,
        on_reply: Callable[[str, ReadReply], None],
    ) -> None:
        self._pool = pool
        self._ledger_id = ledger_id
        self._target = target
        self._on_reply = on_reply
        self._waiters: list[asyncio.Future[None]] = []
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._failures: dict[str, int] = {}  # consecutive failed watches per bookie
        self._last_wait = 0.0
        #: The watch whose bookie answers every LAC move; the others are backups.
        self.lead: str | None = None
        self._told: dict[str, int] = {}  # the highest LAC each watched bookie told
        self._lead_check: asyncio.TimerHandle | None = None

    async def wait(self, timeout: float) -> None:  # noqa: ASYNC109 (the reader's deadline)
        """Return after the next answer or :meth:`wake`, or once ``timeout`` seconds pass."""
        loop = asyncio.get_running_loop()
        self._last_wait = loop.time()
        self._start_missing()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    def wake(self) -> None:
        """Wake every waiter (the LAC moved, or the ledger's metadata changed)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _resolve(waiter)

    def retarget(self) -> None:
        """Follow a new ensemble: stop watching the bookies no longer among the candidates
        and, while watches run, start others in their place."""
        if not self._watches:
            return
        wanted = set(self._target()[0])
        for bookie in [b for b in self._watches if b not in wanted]:
            self._watches.pop(bookie).cancel()
        self._start_missing()

    async def close(self) -> None:
        """Stop every watch and wake the waiters."""
        if self._lead_check is not None:
            self._lead_check.cancel()
        tasks = list(self._watches.values())
        self._watches.clear()
        await cancel_and_wait(*tasks)
        self.wake()

    def _start_missing(self) -> None:
        """Bring the running watches up to the number wanted: preferred bookies first,
        those whose watches failed last. Without a running lead, a running backup takes
        the lead, else the first watch started does."""
        if self.lead not in self._watches:
            self.lead = None
            if self._watches:
                self._promote(next(iter(self._watches)))
                return
        self._fill()

    def _fill(self) -> None:
        candidates, count, _, _ = self._target()
        ranked = sorted(candidates, key=lambda b: self._failures.get(b, 0))  # stable
        for bookie in ranked:
            if len(self._watches) >= count:
                break
            if bookie not in self._watches:
                if self.lead is None:
                    self.lead = bookie
                self._start(bookie)

    def _start(self, bookie: str) -> None:
        self._watches[bookie] = asyncio.get_running_loop().create_task(
            self._run(bookie), name=f"lac-watch-{self._ledger_id}-{bookie}"
        )

    def _promote(self, bookie: str) -> None:
        """Make ``bookie``'s watch the lead: it and the former lead start over in their new
        roles (from the LAC known now)."""
        former, self.lead = self.lead, bookie
        log.debug("LAC watch lead moves", ledger_id=self._ledger_id, lead=bookie, former=former)
        if self._lead_check is not None:
            self._lead_check.cancel()
            self._lead_check = None
        for restarted in (bookie, former):
            task = self._watches.pop(restarted, None) if restarted is not None else None
            if task is not None:
                task.cancel()
        self._start(bookie)
        self._fill()

    def _check_lead(self, backup: str, lac: int) -> None:
        """A backup told ``lac`` :data:`BACKUP_INTERVAL_S` ago: if the lead still has not,
        the backup takes the lead."""
        self._lead_check = None
        lead = self.lead
        if lead is None or backup not in self._watches:
            return
        if self._told.get(lead, -1) < lac:
            self._promote(backup)

    async def _run(self, bookie: str) -> None:
        """Watch one bookie until nobody waits any more; after a failure, hand over to the
        least failed candidate (this bookie again, after a pause, if it is still that)."""
        loop = asyncio.get_running_loop()
        failures = self._failures.get(bookie, 0)
        try:
            if failures:
                await asyncio.sleep(_BACKOFF_S[min(failures - 1, len(_BACKOFF_S) - 1)])
            _, _, after, max_entries = self._target()
            started = loop.time()
            try:
                await self._follow(bookie, after, max_entries)
                self._failures.pop(bookie, None)
                return  # idle: nobody waits any more
            except WalogError as exc:
                log.info(
                    "LAC watch failed", ledger_id=self._ledger_id, bookie=bookie, error=str(exc)
                )
                # A watch that worked for a while starts its pauses over.
                worked = loop.time() - started > WATCH_HEARTBEAT_S
                self._failures[bookie] = 1 if worked else failures + 1
        finally:
            if self._watches.get(bookie) is asyncio.current_task():
                del self._watches[bookie]
        if loop.time() - self._last_wait < WATCH_IDLE_S:
            self._start_missing()

    async def _follow(self, bookie: str, after: int, max_entries: int) -> None:
        """Pass on the answers of one watch until it fails or nobody waits any more."""
        loop = asyncio.get_running_loop()
        lead = bookie == self.lead
        # The watch tells news past ``after`` only: up to it, it has nothing to tell.
        self._told[bookie] = max(self._told.get(bookie, -1), after)
        answers = self._pool.get(bookie).watch_lac(
            self._ledger_id,
            after,
            max_entries=max_entries,
            heartbeat=WATCH_HEARTBEAT_S,
            min_interval=0.0 if lead else BACKUP_INTERVAL_S,
        )
        try:
            async for reply in answers:
                if reply.status in _REFUSED:
                    raise BookieError(f"bookie {bookie} refused the LAC watch: {reply.status.name}")
                self._told[bookie] = max(self._told.get(bookie, -1), reply.lac)
                if (
                    not lead
                    and self._lead_check is None
                    and self.lead is not None
                    and reply.lac > self._told.get(self.lead, -1)
                ):
                    self._lead_check = loop.call_later(
                        BACKUP_INTERVAL_S, self._check_lead, bookie, reply.lac
                    )
                self._on_reply(bookie, reply)
                self.wake()
                if loop.time() - self._last_wait >= WATCH_IDLE_S and not self._waiters:
                    return
        finally:
            await answers.aclose()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


__all__ = ["BACKUP_INTERVAL_S", "WATCH_HEARTBEAT_S", "WATCH_IDLE_S", "LacWatch", "Target"]

"""Retiring the ledgers a log's writer rolled away from (docs/protocol.md, "Rolling").

Once a roll switched new records to the next ledger, the previous one is closed, then its
end is recorded in the log's list. A ledger whose close fails without a sign of another
writer (its bookies or the metadata store are unreachable) is closed by recovery in the
background, the way a takeover would, retried until it succeeds: readers never fence, so
they cannot pass an OPEN ledger, and a takeover fences only the last two. Once the writer
closes, the recoveries are retried for :data:`CLOSE_RECOVERY_SECONDS` more.

A VOLATILE log's records appended after a switch are held by the writer until the ledgers
rolled away from are closed (a close forces every entry) or recovered; :class:`Retirements`
tells it when (:attr:`Retirements.busy`, and the ``release`` hook), and stops it when a
recovery finds that bookies lost acknowledged records, or when records waited
:data:`CLOSE_RECOVERY_SECONDS` for one. The records a bookie refused as too large, packed
again for the next ledger, are held the same way until the refused ledger is closed
(:meth:`Retirements.ending`), in any log: until then its end is not known, and a record
must not be in the log twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable

from tenacity import AsyncRetrying, retry_if_exception, wait_random_exponential

from walog._loggers import get_logger
from walog.errors import (
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    NoSuchLedgerError,
    WalogError,
    WriterFencedError,
)
from walog.log.ledgers import LedgerClientLike, LedgerWriterLike
from walog.log.log_metadata import LedgerInfo, read_log
from walog.log.records import entry_time_range
from walog.log.takeover import ListChanged, record_closed, recover_listed

log = get_logger(__name__)

CLOSE_RECOVERY_SECONDS = 30.0
"""Once ``close()`` began, how long the writer still tries to recover a ledger whose close
failed before it gives up (the next writer's takeover recovers it then); and how long a
VOLATILE log's records appended after such a ledger wait for its recovery before the
writer stops."""


@dataclasses.dataclass(eq=False)
class ActiveLedger:
    """A ledger a log's writer appends (or appended) to, with what the roll policy counts
    and its first and last acknowledged entries (whose records' timestamps the log's list
    keeps once the ledger is closed)."""

    writer: LedgerWriterLike
    started: float = dataclasses.field(default_factory=time.monotonic)
    entries: int = 0
    size_bytes: int = 0
    first_acked: bytes | None = None
    last_acked: bytes | None = None

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self.writer.ledger_id

    def time_range(self) -> tuple[float, float] | None:
        """The timestamps of its first and last acknowledged records (None before one)."""
        if self.first_acked is None or self.last_acked is None:
            return None
        return entry_time_range(self.first_acked)[0], entry_time_range(self.last_acked)[1]


def fenced(name: str, ledger_id: int, exc: BaseException) -> WriterFencedError:
    """The error of a log writer that found ``ledger_id`` fenced or recovered."""
    err = WriterFencedError(
        f"log {name!r}: another writer took over (ledger {ledger_id} was fenced or recovered); "
        "open a new writer to continue"
    )
    err.__cause__ = exc
    return err


@dataclasses.dataclass(frozen=True, slots=True)
class RetireHooks:
    """What retiring a ledger calls back in the log's writer.

    Attributes:
        failure: the writer's failure, if it failed (another writer took over, ...).
        fail: stop the writer with an error.
        holding: whether the writer holds records back (VOLATILE: for a ledger retiring).
        release: send the held records that nothing keeps back any more.
        inflight: the entries sent to a ledger and not yet delivered to their records.
    """

    failure: Callable[[], BaseException | None]
    fail: Callable[[BaseException], None]
    holding: Callable[[], bool]
    release: Callable[[], None]
    inflight: Callable[[ActiveLedger], list[asyncio.Future[int]]]


class Retirements:
    """The ledgers one log writer rolled away from, until each is closed (or recovered).

    Args:
        client: the ledger client of the writer.
        name: the log's name.
        password: the ledgers' password (a recovery needs it).
        epoch: the writer's epoch (the log's, as its takeover left it).
        volatile: whether the log is VOLATILE (records wait for the closes).
        hooks: the writer's side (see :class:`RetireHooks`).
    """

    def __init__(
        self,
        client: LedgerClientLike,
        name: str,
        password: bytes,
        *,
        epoch: int,
        volatile: bool,
        hooks: RetireHooks,
    ) -> None:
        self._client = client
        self._name = name
        self._epoch = epoch
        self._password = password
        self._volatile = volatile
        self._hooks = hooks
        self._loop = asyncio.get_running_loop()
        self.retiring: set[ActiveLedger] = set()
        """The ledgers switched away from whose close has not ended (closed, or handed to a
        recovery)."""
        self._none_retiring = asyncio.Event()  # set while there is none
        self._none_retiring.set()
        self.recoveries: dict[asyncio.Task[None], int] = {}
        """Closes by recovery under way: the task and the ledger's id."""
        self._failures: list[BaseException] = []  # of the recoveries given up, for close()
        self._give_up_at: float | None = None  # loop time when those stop, once closing

    @property
    def busy(self) -> bool:
        """Whether a ledger rolled away from is neither closed nor recovered yet."""
        return bool(self.retiring or self.recoveries)

    def ending(self, ledger: ActiveLedger) -> bool:
        """Whether ``ledger`` was switched away from and its close (or its close by
        recovery) has not ended yet."""
        return ledger in self.retiring or ledger.ledger_id in self.recoveries.values()

    def recovering(self) -> str:
        """The ids of the ledgers being closed by recovery, for messages."""
        return ", ".join(str(i) for i in sorted(self.recoveries.values()))

    async def none_retiring(self) -> None:
        """Wait until every close of a ledger switched away from ended."""
        await self._none_retiring.wait()

    async def retire(self, old: ActiveLedger) -> None:
        """Close ``old``, a ledger switched away from, and release what it held: see
        :meth:`close`."""
        self.retiring.add(old)
        self._none_retiring.clear()
        try:
            await self.close(old)
        finally:
            self.retired(old)

    async def close(self, old: ActiveLedger) -> None:
        """Close a ledger nothing new goes to, then record its end in the log's list. If
        the close fails without a sign of another writer, recover it in the background.

        A VOLATILE log's entries held back for the ledger rolled away from go as soon as
        its close succeeded (it forced every entry), or its recovery did: never later, for
        the update of the log's list, which a metadata store out of reach may hold up (and
        which the next takeover makes again if it fails)."""
        hooks = self._hooks
        inflight = hooks.inflight(old)
        if inflight:
            await asyncio.wait(inflight)  # a cancelled close() leaves them in flight
        if hooks.failure() is not None:
            return
        try:
            await old.writer.close()
        except (LedgerFencedError, LedgerClosedError) as exc:
            hooks.fail(fenced(self._name, old.ledger_id, exc))
            return
        except WalogError as exc:
            log.warning(
                "could not close ledger, recovering it",
                log=self._name,
                ledger=old.ledger_id,
                error=str(exc),
            )
            task = self._loop.create_task(self._close_by_recovery(old, exc))
            self.recoveries[task] = old.ledger_id
            task.add_done_callback(self._recovery_done)
            if self._volatile:  # records appended from now on wait for it
                self._loop.call_later(CLOSE_RECOVERY_SECONDS, self._held_too_long, task)
            return
        self.retired(old)
        last = old.writer.last_add_confirmed
        await record_closed(
            self._client, self._name, old.ledger_id, last, old.size_bytes, old.time_range()
        )

    def retired(self, old: ActiveLedger) -> None:
        """The close of ``old``, a ledger rolled away from, ended: release what it held."""
        if old not in self.retiring:
            return  # the current ledger, closed by the writer's close(); or released already
        self.retiring.discard(old)
        if not self.retiring:
            self._none_retiring.set()
        self._hooks.release()

    def closing(self) -> None:
        """The writer closes: recoveries still under way get :data:`CLOSE_RECOVERY_SECONDS`
        more."""
        self._give_up_at = self._loop.time() + CLOSE_RECOVERY_SECONDS

    async def finish(self) -> None:
        """Wait for the recoveries under way (cancelled if the writer failed: the new
        writer's takeover recovers those ledgers).

        Raises:
            WalogError: a ledger could not be recovered in time; it stays OPEN.
        """
        recoveries = list(self.recoveries)
        if self._hooks.failure() is not None:
            for task in recoveries:
                task.cancel()
        await asyncio.gather(*recoveries, return_exceptions=True)  # failures: recorded
        if self._failures:
            raise self._failures[0]

    async def _close_by_recovery(self, old: ActiveLedger, cause: WalogError) -> None:
        """Close ``old`` the way a takeover would: fence and recover it, which closes it
        with every acknowledged entry (they are on Qa bookies), then record its end.

        Every entry of ``old`` completed before its close was tried, and nothing more goes
        to it, so fencing it costs this writer nothing. Retried while the writer lives, and
        for :data:`CLOSE_RECOVERY_SECONDS` once it closes.

        Raises:
            WalogError: ``close()`` began and the ledger could still not be recovered in
                time; it stays OPEN until the next writer's takeover recovers it.
        """
        hooks = self._hooks
        backoff = wait_random_exponential(multiplier=0.1, max=5.0)

        def left() -> float:
            return math.inf if self._give_up_at is None else self._give_up_at - self._loop.time()

        retrying = AsyncRetrying(
            # Not when the ledger left the list (truncated, or dropped by a takeover):
            # nobody reads it any more, and it never comes back.
            retry=retry_if_exception(
                lambda exc: (
                    isinstance(exc, WalogError)
                    and not isinstance(exc, ListChanged | NoSuchLedgerError)
                )
            ),
            wait=lambda state: max(0.0, min(backoff(state), left())),
            stop=lambda _: left() <= 0,
            reraise=True,
        )
        looked = False
        try:
            async for attempt in retrying:
                with attempt:
                    if hooks.failure() is not None:
                        return  # another writer took over: its takeover recovers the ledger
                    if not looked:
                        state = (await self._client.ledger_metadata(old.ledger_id)).state
                        looked = True
                        if state == "IN_RECOVERY":
                            # Somebody else's recovery, a takeover's (or a sink commit's):
                            # it fences this writer's ledgers too, so it stops now, before
                            # held records could land ahead of its fence.
                            error = MetadataConflictError(f"ledger {old.ledger_id} recovered")
                            hooks.fail(fenced(self._name, old.ledger_id, error))
                            return
                    info = await recover_listed(
                        self._client, LedgerInfo(old.ledger_id), self._password
                    )
                    if await self._taken_over():
                        # The ledger was found closed by the takeover's recovery: the
                        # records held for the next ledger must not go. That ledger was
                        # fenced, maybe deleted since, and a bookie that collected it no
                        # longer knows the fence.
                        error = MetadataConflictError(f"log {self._name!r} taken over")
                        hooks.fail(fenced(self._name, old.ledger_id, error))
                        return
        except (ListChanged, NoSuchLedgerError):
            return  # truncated meanwhile: nobody reads it any more
        except WalogError as exc:
            raise WalogError(
                f"log {self._name!r}: ledger {old.ledger_id} stays OPEN: its close failed "
                f"({cause}) and so did recovering it ({exc}); the next writer's takeover "
                "recovers it, and until then readers wait at its end"
            ) from exc
        log.info("ledger closed by recovery", log=self._name, ledger=old.ledger_id)
        acked = old.writer.last_add_pushed  # every entry completed before the close began
        if info.last_entry_id < acked:
            # A VOLATILE ledger's bookies lost acknowledged entries they had not synced:
            # no later record may follow them into the log.
            hooks.fail(
                WalogError(
                    f"log {self._name!r}: ledger {old.ledger_id} was closed by recovery at "
                    f"entry {info.last_entry_id}, short of entry {acked} it acknowledged: "
                    "bookies lost records that were acknowledged but not yet durable "
                    "(VOLATILE), so this writer stops (open a new one to continue)"
                )
            )
        await record_closed(
            self._client,
            self._name,
            old.ledger_id,
            info.last_entry_id,
            old.size_bytes,
            info.time_range,
        )

    async def _taken_over(self) -> bool:
        """Whether the log's record shows a takeover after this writer's (a later epoch)."""
        meta, _version = await read_log(self._client.ctx.store, self._name)
        return meta.epoch != self._epoch

    def _held_too_long(self, task: asyncio.Task[None]) -> None:
        """Records of a VOLATILE log wait for ``task``'s close by recovery: stop the writer
        if they still do after :data:`CLOSE_RECOVERY_SECONDS` (no append waits without
        end while the ledger's bookies do not answer); look again later if none waits."""
        hooks = self._hooks
        if task.done() or hooks.failure() is not None:
            return
        if not hooks.holding():
            self._loop.call_later(CLOSE_RECOVERY_SECONDS, self._held_too_long, task)
            return
        hooks.fail(
            WalogError(
                f"log {self._name!r}: ledger {self.recoveries[task]} was not closed by "
                f"recovery within {CLOSE_RECOVERY_SECONDS:g} s (its bookies do not answer) "
                "while records appended after it waited for it; the writer stops, and the "
                "next writer's takeover recovers the ledger"
            )
        )

    def _recovery_done(self, task: asyncio.Task[None]) -> None:
        """A close by recovery ended: release the entries it held back, or fail them with
        the writer if it gave up (they cannot follow records that may be lost)."""
        self.recoveries.pop(task, None)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self._failures.append(error)
            if self._hooks.holding():
                self._hooks.fail(error)
        self._hooks.release()


__all__ = [
    "CLOSE_RECOVERY_SECONDS",
    "ActiveLedger",
    "RetireHooks",
    "Retirements",
    "fenced",
]

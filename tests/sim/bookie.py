"""An in-memory bookie with the semantics of the real one (walog/wire/proto/bookie.proto).

What it keeps per ledger, and what survives :meth:`SimBookie.crash`:

- entries: PERSISTENT adds are durable when acknowledged (the real bookie acks after the
  journal fsync); VOLATILE adds sit in the "page cache" until a force (or an entry of the
  ledger being fsynced) makes them durable, and a crash loses them (seed 004).
- the fence flag and the master key: persisted before the reply, survive crashes; a model
  bookie never deletes a ledger (garbage collection runs on the engine's bookies only,
  tests/sim/engine.py).
- the LAC: the highest piggybacked or explicit LAC seen; after a crash it is rebuilt from
  the LACs piggybacked on the surviving entries (an explicit LAC is not journalled).
- the sync cursor (LastAddSynced, seed 004): the longest synced prefix, lifted by a
  piggybacked LAC (entries up to the LAC are confirmed in the cluster).
- long-poll waiters: answered when the LAC passes the reader's, dropped on a crash.
- the incarnation: a new one after every crash, carried by add and force answers (as a real
  bookie draws one each time its storage opens), so a writer can tell a restart.

The network (tests/sim/network.py) decides when requests arrive and whether replies get
back; this class only applies requests to the state, one at a time.
"""

from __future__ import annotations

import asyncio
import dataclasses

from tests.sim.loop import Trace
from walog.transport.base import (
    AddReply,
    FenceReply,
    ForceReply,
    ReadLacReply,
    ReadReply,
    StoredEntry,
)
from walog.wire.digest import entry_digest
from walog.wire.durability import Durability
from walog.wire.status import Status


@dataclasses.dataclass
class _Ledger:
    """One ledger on one bookie."""

    master_key: bytes
    fenced: bool = False
    durable: dict[int, StoredEntry] = dataclasses.field(default_factory=dict)
    volatile: dict[int, StoredEntry] = dataclasses.field(default_factory=dict)
    explicit_lac: int = -1
    piggy_lac: int = -1
    last_add_synced: int = -1
    waiters: list[asyncio.Future[None]] = dataclasses.field(default_factory=list)

    @property
    def lac(self) -> int:
        return max(self.explicit_lac, self.piggy_lac)

    def get(self, entry_id: int) -> StoredEntry | None:
        found = self.volatile.get(entry_id)
        return found if found is not None else self.durable.get(entry_id)

    def last_entry_id(self) -> int:
        return max([*self.durable, *self.volatile], default=-1)

    def advance_sync_cursor(self) -> None:
        # LastAddSynced: every entry up to it is synced here or confirmed in the ensemble.
        cursor = max(self.last_add_synced, self.piggy_lac)
        while cursor + 1 in self.durable:
            cursor += 1
        self.last_add_synced = cursor


class SimBookie:
    """One simulated bookie (see the module docstring).

    Args:
        bookie_id: its id, ``host:port`` style.
        trace: where state changes are logged.
    """

    def __init__(self, bookie_id: str, trace: Trace) -> None:
        self.bookie_id = bookie_id
        self.trace = trace
        self.up = True
        self.paused = False
        self._ledgers: dict[int, _Ledger] = {}
        self.crashes = 0
        self.incarnation = 1
        """Changes with every crash (deterministic: the schedule's RNG is not drawn)."""
        # Unsynced VOLATILE entries lost in crashes: ledger -> entry -> incarnation that
        # lost it; and, per client, the latest incarnation whose add answer reached it.
        self._lost: dict[int, dict[int, int]] = {}
        self._heard: dict[str, int] = {}

    # -- faults -------------------------------------------------------------------------

    def crash(self) -> None:
        """Stop; lose unsynced VOLATILE entries, explicit LACs and long-poll waiters."""
        self.up = False
        self.paused = False
        self.crashes += 1
        for ledger_id, ledger in self._ledgers.items():
            lost = self._lost.setdefault(ledger_id, {})
            for entry_id in ledger.volatile:
                lost[entry_id] = self.incarnation
            ledger.volatile.clear()
            ledger.explicit_lac = -1
            ledger.piggy_lac = max((e.lac for e in ledger.durable.values()), default=-1)
            for waiter in ledger.waiters:
                waiter.cancel()
            ledger.waiters.clear()
        self.incarnation = self.crashes + 1
        self.trace.log(f"{self.bookie_id} CRASH")

    def restart(self) -> None:
        """Start again with the state that survived the crash."""
        self.up = True
        self.trace.log(f"{self.bookie_id} RESTART")

    # -- inspection (invariants) ----------------------------------------------------------

    def stored(self, ledger_id: int, entry_id: int) -> StoredEntry | None:
        """The entry as this bookie would serve it now, or None."""
        ledger = self._ledgers.get(ledger_id)
        return None if ledger is None else ledger.get(entry_id)

    def durable(self, ledger_id: int, entry_id: int) -> StoredEntry | None:
        """The entry if it would survive a crash now, or None."""
        ledger = self._ledgers.get(ledger_id)
        return None if ledger is None else ledger.durable.get(entry_id)

    def lost_unnoticed(self, client: str, ledger_id: int, entry_id: int) -> bool:
        """Whether this bookie lost the entry in a crash and no add answer of a later
        incarnation has reached ``client`` yet: the client cannot know of the loss."""
        lost_by = self._lost.get(ledger_id, {}).get(entry_id)
        return lost_by is not None and self._heard.get(client, 0) <= lost_by

    def heard_by(self, client: str, answer: asyncio.Future[AddReply]) -> None:
        """An add answer reached ``client`` (before the client handles it): note its
        incarnation."""
        if answer.cancelled() or answer.exception() is not None:
            return
        incarnation = answer.result().incarnation
        if incarnation > self._heard.get(client, 0):
            self._heard[client] = incarnation

    def is_fenced(self, ledger_id: int) -> bool:
        """Whether the ledger is fenced on this bookie."""
        ledger = self._ledgers.get(ledger_id)
        return ledger is not None and ledger.fenced

    # -- requests -------------------------------------------------------------------------

    def _ledger_for_write(self, ledger_id: int, master_key: bytes) -> _Ledger | Status:
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            ledger = self._ledgers[ledger_id] = _Ledger(master_key=master_key)
        elif ledger.master_key != master_key:
            return Status.UNAUTHORIZED
        return ledger

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
    ) -> AddReply:
        """Store one entry (recovery write-backs pass the fence)."""
        if entry_digest(ledger_id, entry_id, lac, data) != digest:
            return AddReply(Status.DIGEST_MISMATCH, incarnation=self.incarnation)
        ledger = self._ledger_for_write(ledger_id, master_key)
        if isinstance(ledger, Status):
            return AddReply(ledger, incarnation=self.incarnation)
        if ledger.fenced and not recovery:
            return AddReply(Status.FENCED, ledger.last_add_synced, self.incarnation)
        entry = StoredEntry(ledger_id, entry_id, lac, bytes(data))
        if durability is Durability.PERSISTENT or entry_id in ledger.durable:
            ledger.durable[entry_id] = entry
            ledger.volatile.pop(entry_id, None)
        else:
            ledger.volatile[entry_id] = entry
        self._raise_lac(ledger, piggy=lac)
        ledger.advance_sync_cursor()
        return AddReply(Status.OK, ledger.last_add_synced, self.incarnation)

    def send_lac(self, ledger_id: int, lac: int, master_key: bytes) -> None:
        """An explicit LAC from an idle writer."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None or ledger.master_key != master_key:
            return
        self._raise_lac(ledger, explicit=lac)

    def force(self, ledger_id: int, master_key: bytes) -> ForceReply:
        """Make every entry of the ledger received so far durable."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return ForceReply(Status.NO_SUCH_LEDGER, incarnation=self.incarnation)
        if ledger.master_key != master_key:
            return ForceReply(Status.UNAUTHORIZED, incarnation=self.incarnation)
        ledger.durable.update(ledger.volatile)
        ledger.volatile.clear()
        ledger.advance_sync_cursor()
        return ForceReply(Status.OK, ledger.last_add_synced, self.incarnation)

    def fence(self, ledger_id: int, master_key: bytes) -> FenceReply:
        """Fence the ledger (persisted before the reply), creating it if unknown."""
        ledger = self._ledger_for_write(ledger_id, master_key)
        if isinstance(ledger, Status):
            return FenceReply(ledger)
        if not ledger.fenced:
            ledger.fenced = True
            self.trace.log(f"{self.bookie_id} fenced L{ledger_id}")
        return FenceReply(Status.OK, ledger.lac, ledger.last_entry_id())

    async def read(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_entry_id: int,
        fence: bool,
        master_key: bytes,
        previous_lac: int,
        long_poll_timeout: float,
    ) -> ReadReply:
        """A range read; fence=True fences first; a long poll waits for the LAC to pass."""
        if fence:
            fenced = self.fence(ledger_id, master_key)
            if fenced.status is not Status.OK:
                return ReadReply(fenced.status, [])
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return ReadReply(Status.NO_SUCH_LEDGER, [])
        if long_poll_timeout > 0 and ledger.lac <= previous_lac:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ledger.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, long_poll_timeout)
            except TimeoutError:
                pass
            finally:
                if waiter in ledger.waiters:
                    ledger.waiters.remove(waiter)
            if not self.up:
                raise asyncio.CancelledError
        entries: list[StoredEntry] = []
        entry_id = first_entry_id
        while entry_id <= last_entry_id:
            found = ledger.get(entry_id)
            if found is None:
                break
            entries.append(found)
            entry_id += 1
        status = Status.OK if entries else Status.NO_SUCH_ENTRY
        return ReadReply(status, entries, ledger.lac, ledger.fenced)

    def read_lac(self, ledger_id: int) -> ReadLacReply:
        """The LAC and the last stored entry of the ledger."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return ReadLacReply(Status.NO_SUCH_LEDGER)
        last = ledger.last_entry_id()
        return ReadLacReply(Status.OK, ledger.lac, last, ledger.get(last))

    def _raise_lac(self, ledger: _Ledger, *, piggy: int = -1, explicit: int = -1) -> None:
        before = ledger.lac
        ledger.piggy_lac = max(ledger.piggy_lac, piggy)
        ledger.explicit_lac = max(ledger.explicit_lac, explicit)
        if ledger.lac > before:
            for waiter in ledger.waiters:
                if not waiter.done():
                    waiter.set_result(None)
            ledger.waiters.clear()


__all__ = ["SimBookie"]

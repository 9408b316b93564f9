"""What every simulated schedule must satisfy, checked on the record of what clients saw.

Scenarios record into a :class:`History` as things happen (acknowledged appends, closes,
reads, forces); some rules are checked on the spot because they are about the moment
(an acknowledged entry must sit on an ack quorum *when* it is acknowledged). At the end,
after every fault is healed and every ledger recovered, :meth:`History.check_final`
compares the record with the ledgers as fresh readers see them.

Rule names (used in reports and in docs/correctness.md):

- ``ack_out_of_order``: a writer's acknowledgements come in entry order, without gaps.
- ``ack_without_quorum``: when an entry is acknowledged, at least Qa bookies hold it.
- ``ack_beyond_close``: no acknowledged entry lies beyond its closed ledger's last entry.
- ``close_short_of_acks``: a writer's own successful close records an end at or past every
  entry it acknowledged, whatever the durability (seed 000, "Closing a ledger as a writer";
  a VOLATILE ledger gets there by forcing first, seed 004). Unlike ``ack_beyond_close``
  this holds for VOLATILE ledgers too: a close needs no crash to lose their unsynced tail.
- ``volatile_ack_after_loss``: when a VOLATILE entry is acknowledged, every earlier entry
  of the ledger is still held (page cache or disk) by at least Qa bookies: a writer must
  learn that bookies lost unsynced entries (a restart) before it acknowledges later ones.
  A bookie whose loss the writer cannot know yet (no answer of its new incarnation reached
  the writer: the answers it counted were sent before the crash) still counts as holding.
- ``acked_entry_lost``: every acknowledged entry is readable after recovery, same bytes.
- ``forced_entry_lost``: VOLATILE entries up to a force() result survive crashes.
- ``read_not_in_ledger``: an entry any reader returned (tailing reads up to the LAC
  included) is in the closed ledger with the same bytes.
- ``readers_disagree``: two fresh readers of a closed ledger read the same sequence.
- ``close_disagrees``: every close / recovery that succeeded reports the same last entry.
- ``recovery_failed``: with every bookie back and no faults, recovery completes.
- ``foreign_error``: protocol code raises only WalogError (and cancellation).
- ``stalled``: once every fault is healed, the scenario finishes (liveness).
- ``ledger_state_went_back``: a ledger's state only moves OPEN -> IN_RECOVERY -> CLOSED.
- ``closed_ledger_changed``: a CLOSED ledger's last entry and fragments never change.
- ``writer_closed_recovering_ledger``: the writer never closes a ledger that is
  IN_RECOVERY (seed 000, "Closing a ledger as a writer": it must report an error). Checked
  on the metadata store's transitions: the session that created the ledger must not be the
  one that moves it IN_RECOVERY -> CLOSED, unless that session recovered it itself (it
  fenced it, or moved it to IN_RECOVERY): a log writer recovers a ledger it left whose close
  failed, possibly alongside somebody else's recovery, which is safe; a plain close is not.
- ``ack_unnamed``: when an entry is acknowledged, the stored metadata names the fragment
  that holds it: its write set there has ``Qa`` copies (tests/sim/naming.py; a log record's
  ledger is listed, too: tests/sim/log_invariants.py).
- ``stuck``: the event loop deadlocked or spun (every task waits forever, or a livelock).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from tests.sim.bookie import SimBookie
from walog.metadata.layout import LEDGERS, LedgerMetadata
from walog.wire.durability import Durability

_STATE_ORDER = {"OPEN": 0, "IN_RECOVERY": 1, "CLOSED": 2}


@dataclasses.dataclass(frozen=True)
class Violation:
    """One broken rule."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


@dataclasses.dataclass
class LedgerRecord:
    """What clients saw of one ledger."""

    ledger_id: int
    ack_quorum: int
    durability: Durability
    acked: dict[int, bytes] = dataclasses.field(default_factory=dict)
    ack_order: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    forced: int = -1
    forced_data: dict[int, bytes] = dataclasses.field(default_factory=dict)
    closes: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    reads: list[tuple[str, int, bytes]] = dataclasses.field(default_factory=list)


class History:
    """The record of one schedule, and the checks over it."""

    def __init__(self, bookies: Mapping[str, SimBookie]) -> None:
        self._bookies = bookies
        self.ledgers: dict[int, LedgerRecord] = {}
        self.violations: list[Violation] = []
        self._creators: dict[str, str] = {}
        self._recoverers: dict[str, str] = {}  # who moved each ledger to IN_RECOVERY
        self._fencers: dict[int, set[str]] = {}  # who sent a fence for each ledger
        self.naming: Callable[[int, int], str | None] | None = None
        """``ack_unnamed``: why the stored metadata does not name an entry's fragment yet
        (None: it does), given ledger and entry; set by the world."""

    def violate(self, rule: str, detail: str) -> None:
        """Record a broken rule."""
        self.violations.append(Violation(rule, detail))

    def ledger(self, metadata: LedgerMetadata) -> LedgerRecord:
        """The record of a ledger, made on first sight."""
        record = self.ledgers.get(metadata.ledger_id)
        if record is None:
            record = self.ledgers[metadata.ledger_id] = LedgerRecord(
                metadata.ledger_id, metadata.ack_quorum, metadata.durability
            )
        return record

    # -- events -------------------------------------------------------------------------

    def on_ack(self, who: str, record: LedgerRecord, entry_id: int, data: bytes) -> None:
        """A writer's append of ``data`` completed as ``entry_id``."""
        order = record.ack_order.setdefault(who, [])
        expected = order[-1] + 1 if order else 0
        if entry_id != expected:
            self.violate(
                "ack_out_of_order",
                f"{who} L{record.ledger_id}: acknowledged e{entry_id} after {order[-3:]}",
            )
        order.append(entry_id)
        record.acked[entry_id] = data
        if self.naming is not None and (why := self.naming(record.ledger_id, entry_id)):
            self.violate("ack_unnamed", f"{who} acknowledged {why}")
        holders = [
            b.bookie_id
            for b in self._bookies.values()
            if (s := b.stored(record.ledger_id, entry_id)) is not None and s.data == data
        ]
        # A VOLATILE ack promises only the page cache: a crash right after may undo it
        # (seed 004). Durability of VOLATILE entries is checked through force() instead.
        if len(holders) < record.ack_quorum and record.durability is Durability.PERSISTENT:
            self.violate(
                "ack_without_quorum",
                f"{who} L{record.ledger_id} e{entry_id} acknowledged but held by {holders} "
                f"(Qa={record.ack_quorum})",
            )
        if record.durability is Durability.VOLATILE:
            self._check_volatile_prefix(who, record, entry_id)

    def _check_volatile_prefix(self, who: str, record: LedgerRecord, entry_id: int) -> None:
        """``volatile_ack_after_loss``: the entries before a VOLATILE ack are still on Qa
        bookies (the ack says they were; a restart in between must have stopped it)."""
        for earlier in range(entry_id):
            data = record.acked.get(earlier)
            holders = [
                b.bookie_id
                for b in self._bookies.values()
                if (
                    (s := b.stored(record.ledger_id, earlier)) is not None
                    and (data is None or s.data == data)
                )
                or b.lost_unnoticed(who, record.ledger_id, earlier)
            ]
            if len(holders) < record.ack_quorum:
                self.violate(
                    "volatile_ack_after_loss",
                    f"{who} L{record.ledger_id} acknowledged e{entry_id} while e{earlier} "
                    f"is held by {holders} only (Qa={record.ack_quorum})",
                )
                return

    def on_force(self, record: LedgerRecord, synced: int) -> None:
        """A force() returned ``synced``: entries up to it must survive crashes."""
        if synced > record.forced:
            record.forced = synced
        for entry_id in range(synced + 1):
            if entry_id in record.acked:
                record.forced_data.setdefault(entry_id, record.acked[entry_id])

    def on_close(self, who: str, record: LedgerRecord, last_entry_id: int) -> None:
        """A close or recovery by ``who`` succeeded with ``last_entry_id``."""
        record.closes.append((who, last_entry_id))
        acked = record.ack_order.get(who)
        if acked and last_entry_id < acked[-1]:
            self.violate(
                "close_short_of_acks",
                f"{who} closed {record.durability.name} L{record.ledger_id} at "
                f"{last_entry_id} after acknowledging up to e{acked[-1]}",
            )

    def on_read(self, who: str, record: LedgerRecord, entry_id: int, data: bytes) -> None:
        """A reader returned an entry."""
        record.reads.append((who, entry_id, data))

    def on_fence(self, session: str, ledger_id: int) -> None:
        """``session`` sent a fence for the ledger (a recovery, never a writer's close)."""
        self._fencers.setdefault(ledger_id, set()).add(session)

    def on_error(self, who: str, exc: BaseException) -> None:
        """A protocol call raised; only WalogError subclasses are allowed."""
        from walog.errors import WalogError

        if not isinstance(exc, WalogError):
            self.violate("foreign_error", f"{who}: {type(exc).__name__}: {exc}")

    # -- metadata transitions (an observer of the simulated metadata server) ----------------

    def on_metadata(self, session: str, path: str, old: bytes | None, new: bytes | None) -> None:
        """Check one change of a ledger record against the state-machine rules."""
        if not path.startswith(LEDGERS + "/"):
            return
        if old is None and new is not None:
            self._creators[path] = session
            return
        if old is None or new is None:
            return
        before, after = LedgerMetadata.from_json(old), LedgerMetadata.from_json(new)
        lid = after.ledger_id
        if _STATE_ORDER[after.state] < _STATE_ORDER[before.state]:
            self.violate(
                "ledger_state_went_back", f"{session} set L{lid} {before.state}->{after.state}"
            )
        if before.is_closed and (
            after.last_entry_id != before.last_entry_id or after.ensembles != before.ensembles
        ):
            self.violate(
                "closed_ledger_changed",
                f"{session} changed closed L{lid} (last {before.last_entry_id}->"
                f"{after.last_entry_id})",
            )
        if before.state == "OPEN" and after.state == "IN_RECOVERY":
            self._recoverers[path] = session
        if (
            before.state == "IN_RECOVERY"
            and after.is_closed
            and self._creators.get(path) == session
            and self._recoverers.get(path) != session
            and session not in self._fencers.get(lid, ())
        ):
            self.violate(
                "writer_closed_recovering_ledger",
                f"{session} (its writer) closed L{lid} at {after.last_entry_id} during recovery",
            )

    # -- the end --------------------------------------------------------------------------

    def check_final(
        self,
        closed: Mapping[int, LedgerMetadata],
        contents: Mapping[int, Sequence[Sequence[tuple[int, bytes]]]],
    ) -> list[Violation]:
        """Check the record against each ledger's closed metadata and the entry sequences
        that fresh readers read from it (two or more per ledger)."""
        for ledger_id, record in sorted(self.ledgers.items()):
            metadata = closed.get(ledger_id)
            if metadata is None:
                self.violate("recovery_failed", f"L{ledger_id} could not be closed")
                continue
            self._check_ledger(record, metadata, contents.get(ledger_id, []))
        return self.violations

    def _check_ledger(
        self,
        record: LedgerRecord,
        metadata: LedgerMetadata,
        reads: Sequence[Sequence[tuple[int, bytes]]],
    ) -> None:
        lid, last = record.ledger_id, metadata.last_entry_id
        for who, reported in record.closes:
            if reported != last:
                self.violate("close_disagrees", f"{who} closed L{lid} at {reported}, final {last}")
        beyond = sorted(e for e in record.acked if e > last)
        if beyond and record.durability is Durability.PERSISTENT:
            self.violate("ack_beyond_close", f"L{lid} closed at {last}, acked {beyond[:5]}")
        if not reads:
            return
        first = dict(reads[0])
        for i, other in enumerate(reads[1:], start=1):
            if list(other) != list(reads[0]):
                self.violate("readers_disagree", f"L{lid} reader 0 and reader {i} differ")
        if sorted(first) != list(range(last + 1)):
            self.violate("readers_disagree", f"L{lid} read {len(first)} entries, last {last}")
        if record.durability is Durability.PERSISTENT:
            for entry_id, data in sorted(record.acked.items()):
                if entry_id <= last and first.get(entry_id) != data:
                    self.violate(
                        "acked_entry_lost", f"L{lid} e{entry_id} reads {first.get(entry_id)!r}"
                    )
        for entry_id, data in sorted(record.forced_data.items()):
            if first.get(entry_id) != data:
                self.violate(
                    "forced_entry_lost", f"L{lid} e{entry_id} reads {first.get(entry_id)!r}"
                )
        for who, entry_id, data in record.reads:
            if first.get(entry_id) != data:
                self.violate(
                    "read_not_in_ledger",
                    f"{who} read L{lid} e{entry_id}={data!r}, ledger has {first.get(entry_id)!r}",
                )


__all__ = ["History", "LedgerRecord", "Violation"]

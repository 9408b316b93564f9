"""What every simulated schedule of the log layer must satisfy (ledgers -> logs, seed 000).

Log scenarios record acknowledged records (with the writer's epoch and append order), the
records tailing readers returned and truncation points; :meth:`LogHistory.check_final`
compares that with what two fresh readers read after a final takeover.

Rule names:

- ``log_record_lost``: every acknowledged record not truncated away is read back, same bytes
  (in a VOLATILE log: every one a later ``flush()`` of its writer made durable).
- ``log_ledger_missing``: every ledger holding such a record is in the log's ledger list.
- ``log_order``: one writer's acknowledged records sit in the log in the order it appended.
- ``log_writers_overlap``: at most one writer at a time: every acknowledged record of an
  earlier takeover (epoch) lies before every one of a later takeover.
- ``log_readers_disagree``: two fresh readers read the same sequence, in position order.
- ``log_reader_skipped``: a tailing reader's records are a prefix of the final sequence
  (nothing skipped, nothing read that the log does not hold).
- ``log_hole``: one writer's records in the log form a prefix of its appends (past what was
  truncated away): a record is never in the log while an earlier one of the same writer is
  not, acknowledged or not (an append that failed may or may not be in the log, but never
  with a later one and without itself).
- ``log_ack_not_prefix``: one writer's acknowledged records form a prefix of its appends,
  acknowledged in append order, across rolls: no record is acknowledged while an earlier
  one is unacknowledged (in flight or failed).
- ``ack_unnamed``: when a record is acknowledged, the log's stored record lists its ledger
  and the ledger's stored metadata names the fragment that holds its entry
  (tests/sim/naming.py).
- ``log_listed_ledger_deleted``: a ledger is never deleted while the log's stored list
  names it (checked on the metadata server's changes: a takeover or roll whose CAS applied
  although its answer was lost must not take its own change for a rival's and delete
  its new ledger).
- ``log_timestamp_decreased``: a fresh reader's records carry non-decreasing timestamps,
  although the writer processes' clocks run 5 s ahead of or behind each other
  (tests/sim/log_scenarios.py): a takeover stamps no lower than the log's last record.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence

from walog.log.log_metadata import LogMetadata
from walog.log.position import Position
from walog.metadata.layout import LEDGERS, LOGS

Violate = Callable[[str, str], None]


@dataclasses.dataclass(frozen=True)
class LogAck:
    """One acknowledged record."""

    who: str
    epoch: int
    index: int  # append order within its writer
    position: Position
    data: bytes


class LogHistory:
    """The record of one schedule's log activity."""

    def __init__(self) -> None:
        self.acks: list[LogAck] = []
        self.reads: dict[str, list[tuple[Position, bytes]]] = {}
        self.truncated_before: Position | None = None
        self.volatile = False
        """A VOLATILE log: a record is durable once a flush after it succeeded."""
        self._next_index: dict[tuple[str, int], int] = {}
        self._flushed: dict[tuple[str, int], int] = {}
        self.naming: Callable[[Position], str | None] | None = None
        """``ack_unnamed``: why the stored metadata does not name a record's ledger or
        fragment yet (None: it does); set by the world."""

    def metadata_observer(self, violate: Violate) -> Callable[..., None]:
        """An observer of the metadata server's changes checking ``log_listed_ledger_deleted``."""
        listed: dict[str, frozenset[int]] = {}

        def observe(session: str, path: str, old: bytes | None, new: bytes | None) -> None:
            if path.startswith(LOGS + "/"):
                meta = LogMetadata.from_json(new) if new is not None else None
                listed[path] = frozenset(meta.ledger_ids if meta is not None else ())
                if old is not None and meta is not None:
                    self._note_head_removal(LogMetadata.from_json(old), meta)
            elif path.startswith(LEDGERS + "/") and new is None:
                ledger_id = int(path.rsplit("/", 1)[1])
                for log_path, ids in sorted(listed.items()):
                    if ledger_id in ids:
                        violate(
                            "log_listed_ledger_deleted",
                            f"{session} deleted L{ledger_id}, which {log_path} lists",
                        )

        return observe

    def _note_head_removal(self, before: LogMetadata, after: LogMetadata) -> None:
        """A change that removed head ledgers without a takeover (a truncation or a
        retention pass): records before the new head may be gone."""
        if after.epoch != before.epoch or not after.ledgers:
            return
        head = after.ledgers[0].ledger_id
        if any(i.ledger_id < head for i in before.ledgers):
            self.on_truncate(Position(head, 0, 0))

    def on_ack(self, ack: LogAck, violate: Violate) -> None:
        """A record's append completed; checks ``log_ack_not_prefix`` on the spot."""
        self.acks.append(ack)
        writer = (ack.who, ack.epoch)
        expected = self._next_index.get(writer, 0)
        if ack.index != expected:
            violate(
                "log_ack_not_prefix",
                f"{ack.who} epoch {ack.epoch}: record {ack.index} acknowledged while record "
                f"{expected} was not",
            )
        self._next_index[writer] = max(expected, ack.index + 1)
        if self.naming is not None and (why := self.naming(ack.position)):
            violate("ack_unnamed", f"{ack.who} acked {ack.position}: {why}")

    def on_read(self, who: str, position: Position, data: bytes) -> None:
        """A tailing reader returned a record."""
        self.reads.setdefault(who, []).append((position, data))

    def on_flushed(self, who: str, epoch: int, count: int) -> None:
        """A flush of a writer succeeded after its first ``count`` appends."""
        key = (who, epoch)
        self._flushed[key] = max(self._flushed.get(key, 0), count)

    def _durable(self, ack: LogAck) -> bool:
        return not self.volatile or ack.index < self._flushed.get((ack.who, ack.epoch), 0)

    def on_truncate(self, before: Position) -> None:
        """A truncation before ``before`` was asked for (records before it may go)."""
        if self.truncated_before is None or before > self.truncated_before:
            self.truncated_before = before

    def _kept(self, position: Position) -> bool:
        return self.truncated_before is None or position >= self.truncated_before

    def check_final(
        self,
        ledger_list: Sequence[int],
        final_reads: Sequence[Sequence[tuple[Position, bytes]]],
        violate: Violate,
    ) -> None:
        """Check the record against the final ledger list and two fresh readers' records."""
        self._check_writers(violate)
        if not final_reads:
            return
        final = list(final_reads[0])
        for i, other in enumerate(final_reads[1:], start=1):
            if list(other) != final:
                violate("log_readers_disagree", f"reader 0 and reader {i} read differently")
        positions = [p for p, _ in final]
        if positions != sorted(set(positions)):
            violate("log_readers_disagree", "a fresh reader's positions are not increasing")
        self._check_holes(final, violate)
        by_position = dict(final)
        listed = set(ledger_list)
        for ack in self.acks:
            if not self._kept(ack.position) or not self._durable(ack):
                continue
            if ack.position.ledger_id not in listed:
                violate("log_ledger_missing", f"{ack.who} acked {ack.position}, not listed")
            got = by_position.get(ack.position)
            if got != ack.data:
                violate(
                    "log_record_lost", f"{ack.who} acked {ack.position}={ack.data!r}, read {got!r}"
                )
        for who, records in sorted(self.reads.items()):
            kept = [(p, d) for p, d in records if self._kept(p)]
            expected = [(p, d) for p, d in final if self._kept(p)][: len(kept)]
            if kept != expected:
                pairs = zip(kept, expected, strict=False)
                at = next((i for i, (a, b) in enumerate(pairs) if a != b), len(expected))
                violate(
                    "log_reader_skipped",
                    f"{who} read {kept[at : at + 2]} where the log has {expected[at : at + 2]}",
                )

    def _check_holes(self, final: Sequence[tuple[Position, bytes]], violate: Violate) -> None:
        """``log_hole``: per writer, the append indices read are consecutive, and start at 0
        unless a truncation may have removed the first ones."""
        indices: dict[str, list[int]] = {}
        for _, data in final:
            writer, _, index = data.decode().rpartition(":")
            indices.setdefault(writer, []).append(int(index))
        for writer, found in sorted(indices.items()):
            first = 0 if self.truncated_before is None else found[0]
            expected = list(range(first, first + len(found)))
            if found != expected:
                pairs = enumerate(zip(found, expected, strict=True))
                at = next(i for i, (a, b) in pairs if a != b)
                violate(
                    "log_hole",
                    f"{writer}: the log holds record {found[at]} where record {expected[at]} "
                    "(appended before it) is missing",
                )

    def _check_writers(self, violate: Violate) -> None:
        by_writer: dict[tuple[str, int], list[LogAck]] = {}
        for ack in self.acks:
            by_writer.setdefault((ack.who, ack.epoch), []).append(ack)
        for (who, epoch), acks in sorted(by_writer.items()):
            ordered = [a.position for a in sorted(acks, key=lambda a: a.index)]
            if ordered != sorted(ordered):
                violate("log_order", f"{who} epoch {epoch}: positions not in append order")
        spans = sorted(
            (epoch, min(a.position for a in acks), max(a.position for a in acks), who)
            for (who, epoch), acks in by_writer.items()
        )
        for (e1, _lo1, hi1, w1), (e2, lo2, _hi2, w2) in itertools.pairwise(spans):
            if e1 == e2 and w1 != w2:
                violate("log_writers_overlap", f"{w1} and {w2} both wrote as epoch {e1}")
            elif hi1 >= lo2:
                violate(
                    "log_writers_overlap",
                    f"{w1} (epoch {e1}) acked {hi1} at or after {w2} (epoch {e2}) acked {lo2}",
                )


__all__ = ["LogAck", "LogHistory"]

"""Test-only protocol mutations: switches that plant known bugs at decision points.

The simulator (tests/sim) proves that its invariant checker catches real protocol bugs by
turning one of these on and searching schedules until an invariant breaks
(tests/sim/test_mutations.py). Production code reads them at the decision points with
``if mutations.enabled("name"):``; the set is empty unless a test fills it, so in normal
use every check is one lookup in an empty frozenset.

Never enable a mutation outside tests: each one makes the protocol unsafe on purpose.

Known mutations:

- ``no_fence_on_recovery_reads``: recovery reads and LAC reads do not fence the bookies.
- ``timeout_counts_as_absent``: recovery treats a timeout as "no such entry".
- ``recovery_starts_at_lac``: recovery reads forward from the highest LAC seen, ignoring
  that entries before the last fragment's first entry are settled.
- ``out_of_order_ack``: the writer completes an add once it has its ack quorum, without
  waiting for lower entries.
- ``close_while_in_recovery``: the writer's close overwrites an IN_RECOVERY ledger.
- ``close_short_of_acks``: the writer's close records its LAC even where it lags the
  entries acknowledged to the caller (a VOLATILE ledger's unsynced entries).
- ``log_fences_only_last_ledger``: a new log writer fences only the last ledger.
- ``log_sends_across_roll_at_once``: after a roll, the log writer sends entries to the new
  ledger while entries of the previous one are still in flight.
- ``roll_acks_before_listing``: a roll switches the log writer to its new ledger (and
  closes the previous one) before the log's record lists the new ledger, so records are
  acknowledged in a ledger the metadata does not name yet (which a read barrier misses).
- ``ensemble_acks_before_writing``: a ledger writer's ensemble change resends its pending
  adds to the new bookies, and completes them, before the new fragment is written to the
  metadata, so entries are acknowledged in a fragment the metadata does not name yet.
- ``barrier_stops_at_lac``: a log's read barrier ends at the last add confirmed its
  bookies report instead of the highest entry they store, so it misses records the writer
  acknowledged before the bookies learnt the new LAC.
- ``lost_answer_taken_for_rival``: a log takeover or roll that finds its own change in the
  list (its CAS applied, the answer lost) takes it for a rival's and deletes its new ledger
  at once (as ``failed_list_change_deletes_new_ledger``).
- ``volatile_log_flush_skips_force``: a VOLATILE log's ``flush()`` returns once its records
  are acknowledged, without forcing them.
- ``failed_list_change_deletes_new_ledger``: a log takeover or roll whose list change failed
  (cancelled, or out of attempts) deletes its new ledger at once, although the CAS may
  still apply.
- ``checkpoint_probes_after_freezing``: a bookie's checkpoint after a failed one probes the
  disk between freezing its write cache and queueing the journal barrier of its mark.
- ``compaction_skips_unreadable``: a bookie's compaction takes an entry the disk failed to
  read (EIO) for a damaged one: it leaves it behind and deletes the entry log
  (bookie/storage/entry_storage.py).
- ``verify_counts_unreadable_as_held``: auto-recovery's share check counts a copy its
  bookie cannot read (IO_ERROR) as held, so the copy is never replaced.
- ``volatile_writer_ignores_restart``: a VOLATILE ledger's writer counts the answers of a
  bookie that restarted (a new incarnation) although it may have lost entries it had
  acknowledged but not synced.
- ``archive_marks_unsynced_output``: the archive job marks its ledgers archived without
  syncing the files and directories it published, and a rerun trusts a staging directory
  that holds Spark's ``_SUCCESS`` whether or not its files reached the disk.
- ``statemachine_accepts_volatile``: a replicated state machine is built on a VOLATILE log,
  so its leader answers commands whose records no bookie has synced.
- ``deleted_ledger_forgets_fence``: a bookie forgets a ledger it deleted (garbage
  collection) altogether, fence included, so a writer that never learnt of the deletion
  recreates the ledger there with a plain add (bookie/storage/engine.py).
- ``stop_swallows_own_cancel``: stopping a task (walog/_tasks.py) swallows a cancellation
  of the stopping task itself, as ``suppress(CancelledError)`` around the wait does: a
  state machine cancelled as its term winds down never stops.
- ``takeover_ignores_last_timestamp``: a new log writer stamps its records with its own
  clock from the start, without the floor of the log's last record's timestamp, so a clock
  behind its predecessor's makes the log's timestamps decrease (walog/log/writer.py).

``verify_counts_unreadable_as_held`` lies outside what the simulator models (auto-recovery):
a named test turns it on and shows the harm instead (``CAUGHT_BY_TESTS`` in
tests/unit/ledger/test_mutation_points.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

KNOWN: frozenset[str] = frozenset(
    {
        "no_fence_on_recovery_reads",
        "timeout_counts_as_absent",
        "recovery_starts_at_lac",
        "out_of_order_ack",
        "close_while_in_recovery",
        "close_short_of_acks",
        "log_fences_only_last_ledger",
        "lost_answer_taken_for_rival",
        "log_sends_across_roll_at_once",
        "roll_acks_before_listing",
        "barrier_stops_at_lac",
        "ensemble_acks_before_writing",
        "volatile_log_flush_skips_force",
        "checkpoint_probes_after_freezing",
        "failed_list_change_deletes_new_ledger",
        "compaction_skips_unreadable",
        "verify_counts_unreadable_as_held",
        "volatile_writer_ignores_restart",
        "archive_marks_unsynced_output",
        "statemachine_accepts_volatile",
        "deleted_ledger_forgets_fence",
        "stop_swallows_own_cancel",
        "takeover_ignores_last_timestamp",
    }
)
"""Every mutation name the protocol code knows."""

_enabled: frozenset[str] = frozenset()


def enabled(name: str) -> bool:
    """True when the test-only mutation ``name`` is switched on (never in production)."""
    return name in _enabled


def active() -> frozenset[str]:
    """The mutations switched on now."""
    return _enabled


def set_enabled(names: Iterable[str]) -> None:
    """Switch on exactly ``names`` (tests only); ValueError for an unknown name."""
    global _enabled
    wanted = frozenset(names)
    unknown = wanted - KNOWN
    if unknown:
        raise ValueError(f"unknown mutation(s) {sorted(unknown)}; known: {sorted(KNOWN)}")
    _enabled = wanted


@contextlib.contextmanager
def enabled_mutations(*names: str) -> Iterator[None]:
    """Switch on ``names`` for the duration of a ``with`` block (tests only)."""
    before = _enabled
    set_enabled(names)
    try:
        yield
    finally:
        set_enabled(before)


__all__ = ["KNOWN", "active", "enabled", "enabled_mutations", "set_enabled"]

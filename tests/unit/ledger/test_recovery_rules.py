"""Pure recovery rules: start point, fence coverage, absence of an entry, close conflicts."""

from __future__ import annotations

import pytest

from walog import mutations
from walog.errors import BookieUnavailableError, UnauthorizedError
from walog.ledger.quorum import Answer, QuorumCoverage
from walog.ledger.readops import EntryProbe, classify_fence, classify_lac, lac_of
from walog.ledger.recovery import (
    CloseConflict,
    close_conflict_action,
    recovery_start,
    replace_in_last_fragment,
)
from walog.metadata.layout import LedgerMetadata
from walog.transport.base import FenceReply, ReadLacReply, ReadReply, StoredEntry
from walog.wire.status import Status

B = ("b1:1", "b2:2", "b3:3")


def _md(
    *fragments: tuple[int, tuple[str, ...]], e: int = 3, qw: int = 2, qa: int = 2
) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=7,
        ensemble_size=e,
        write_quorum=qw,
        ack_quorum=qa,
        state="IN_RECOVERY",
        ensembles=tuple(fragments),
    )


def _stored(entry_id: int) -> StoredEntry:
    return StoredEntry(ledger_id=7, entry_id=entry_id, lac=entry_id - 1, data=b"x")


# --- start point -------------------------------------------------------------------------


def test_start_point_is_the_highest_lac_seen_when_it_is_past_the_last_fragment_start() -> None:
    md = _md((0, B), (12, ("b4:4", "b2:2", "b3:3")))
    assert recovery_start(md, 20) == 20


def test_start_point_is_before_the_last_fragment_when_lacs_lag_behind_it() -> None:
    # The writer started the fragment at 12 only after completing 0..11.
    md = _md((0, B), (12, ("b4:4", "b2:2", "b3:3")))
    assert recovery_start(md, 5) == 11
    assert recovery_start(md, -1) == 11


def test_start_point_of_an_empty_single_fragment_ledger_is_minus_one() -> None:
    assert recovery_start(_md((0, B)), -1) == -1


def test_start_point_mutation_ignores_the_fragment_start() -> None:
    md = _md((0, B), (12, B))
    with mutations.enabled_mutations("recovery_starts_at_lac"):
        assert recovery_start(md, 5) == 5


# --- fencing coverage --------------------------------------------------------------------


def test_fence_needs_qw_minus_qa_plus_one_answers_in_every_write_quorum() -> None:
    # E=3, Qw=2, Qa=2: one fenced bookie per write quorum {0,1}, {1,2}, {2,0}.
    cov = QuorumCoverage(3, 2, 2)
    cov.add(1, classify_fence(7, B[1], FenceReply(Status.OK, lac=3)))
    assert not cov.covered()  # quorum {2,0} untouched
    cov.add(0, classify_fence(7, B[0], FenceReply(Status.OK, lac=4)))
    assert cov.covered()


def test_fence_with_qa_one_needs_every_bookie_of_each_write_quorum() -> None:
    cov = QuorumCoverage(3, 3, 1)
    cov.add(0, classify_fence(7, B[0], FenceReply(Status.OK)))
    cov.add(1, classify_fence(7, B[1], FenceReply(Status.OK)))
    assert not cov.covered()
    cov.add(2, classify_fence(7, B[2], FenceReply(Status.FENCED)))
    assert cov.covered()


def test_fence_timeouts_and_errors_are_unknown_never_fenced() -> None:
    assert classify_fence(7, B[0], BookieUnavailableError("timeout")) is Answer.UNKNOWN
    assert classify_fence(7, B[0], FenceReply(Status.IO_ERROR)) is Answer.UNKNOWN
    cov = QuorumCoverage(3, 3, 2)
    cov.add(0, classify_fence(7, B[0], FenceReply(Status.OK)))
    cov.add(1, classify_fence(7, B[1], BookieUnavailableError("timeout")))
    cov.add(2, classify_fence(7, B[2], FenceReply(Status.IO_ERROR)))
    assert not cov.covered()


def test_fence_unauthorized_raises() -> None:
    with pytest.raises(UnauthorizedError, match="master key"):
        classify_fence(7, B[0], FenceReply(Status.UNAUTHORIZED))


def test_lac_answers_count_explicit_no_such_ledger_and_take_the_embedded_lac() -> None:
    assert classify_lac(7, B[0], ReadLacReply(Status.NO_SUCH_LEDGER)) is Answer.POSITIVE
    assert classify_lac(7, B[0], BookieUnavailableError("x")) is Answer.UNKNOWN
    reply = ReadLacReply(Status.OK, lac=3, last_entry_id=5, last_entry=_stored(5))
    assert lac_of(reply) == 4  # entry 5 carries LAC 4, above the bookie's 3
    assert lac_of(ReadLacReply(Status.NO_SUCH_LEDGER)) == -1


# --- absence of an entry -----------------------------------------------------------------


def test_entry_found_when_any_bookie_of_its_write_set_returns_it() -> None:
    probe = EntryProbe(7, 12, write_quorum=3, ack_quorum=2)
    probe.record(B[0], ReadReply(Status.NO_SUCH_ENTRY, []))
    probe.record(B[1], ReadReply(Status.OK, [_stored(12)]))
    assert probe.found and probe.decided and not probe.absent
    assert probe.entry == _stored(12)


def test_entry_absent_only_with_qw_minus_qa_plus_one_explicit_no_such_entry() -> None:
    probe = EntryProbe(7, 13, write_quorum=3, ack_quorum=2)
    probe.record(B[0], ReadReply(Status.NO_SUCH_ENTRY, []))
    assert not probe.decided
    probe.record(B[1], ReadReply(Status.NO_SUCH_LEDGER, []))
    assert probe.absent and not probe.found


def test_unknown_is_not_absent_timeouts_never_truncate() -> None:
    probe = EntryProbe(7, 13, write_quorum=3, ack_quorum=2)
    probe.record(B[0], ReadReply(Status.NO_SUCH_ENTRY, []))
    probe.record(B[1], BookieUnavailableError("paused"))
    probe.record(B[2], ReadReply(Status.IO_ERROR, []))
    assert not probe.decided
    assert probe.unknown(B) == [B[1], B[2]]


def test_digest_mismatch_is_unknown_not_absent() -> None:
    probe = EntryProbe(7, 13, write_quorum=2, ack_quorum=2)
    probe.record(B[0], ReadReply(Status.DIGEST_MISMATCH, []))
    assert not probe.decided
    probe.record(B[1], ReadReply(Status.NO_SUCH_ENTRY, []))
    assert probe.absent  # Qw - Qa + 1 = 1 explicit answer suffices here


def test_entry_probe_unauthorized_raises() -> None:
    probe = EntryProbe(7, 1, write_quorum=2, ack_quorum=1)
    with pytest.raises(UnauthorizedError):
        probe.record(B[0], ReadReply(Status.UNAUTHORIZED, []))


def test_timeout_as_absent_mutation_breaks_the_rule() -> None:
    probe = EntryProbe(7, 13, write_quorum=3, ack_quorum=2)
    with mutations.enabled_mutations("timeout_counts_as_absent"):
        probe.record(B[0], BookieUnavailableError("paused"))
        probe.record(B[1], BookieUnavailableError("paused"))
    assert probe.absent


# --- close conflicts and local ensemble changes ------------------------------------------


def test_close_conflict_accepts_a_ledger_someone_else_closed() -> None:
    started = _md((0, B))
    theirs = started.with_changes(state="CLOSED", last_entry_id=11)
    assert close_conflict_action(theirs, started) is CloseConflict.ACCEPT


def test_close_conflict_retries_while_in_recovery_over_the_same_fragments() -> None:
    started = _md((0, B))
    touched = started.with_changes(custom_metadata={"k": "v"})
    assert close_conflict_action(touched, started) is CloseConflict.RETRY


def test_close_conflict_restarts_when_the_fragments_changed() -> None:
    started = _md((0, B))
    moved = started.with_changes(ensembles=((0, B), (5, ("b4:4", "b2:2", "b3:3"))))
    assert close_conflict_action(moved, started) is CloseConflict.RESTART


def test_write_back_replacement_adds_a_fragment_from_the_entry() -> None:
    md = _md((0, B))
    out = replace_in_last_fragment(md, 12, {"b1:1": "b4:4"})
    assert out.ensembles == ((0, B), (12, ("b4:4", "b2:2", "b3:3")))
    again = replace_in_last_fragment(out, 12, {"b2:2": "b5:5"})
    assert again.ensembles == ((0, B), (12, ("b4:4", "b5:5", "b3:3")))
    assert md.ensembles == ((0, B),)  # the original is untouched


def test_write_back_replacement_rejects_entries_before_the_last_fragment() -> None:
    with pytest.raises(ValueError, match="last fragment"):
        replace_in_last_fragment(_md((0, B), (12, B)), 3, {"b1:1": "b4:4"})

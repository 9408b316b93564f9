"""The checker bites: each planted protocol bug is found within a bounded number of schedules.

For every test-only mutation (walog/mutations.py) the search runs seeds 0, 1, 2, ...
of the scenario most likely to expose it until an invariant breaks, then replays the
failing seed without the mutation to show that the planted bug, not the schedule, broke it.
The protocol's tunables stay at their production values here, unless a case draws them.

The default suite starts each search at the first seed known to break (``FOUND_AT``), and
searches from 0 only when that seed no longer does (the schedule generator changed: the test
prints the new seed to write down); ``--slow`` searches every mutation from seed 0, which
measures how many schedules each needs (the table in docs/correctness.md).
"""

from __future__ import annotations

import pytest

from tests.sim.scenarios import Outcome, run_schedule

ENGINE = {"engine": True, "cancel": True}
"""Schedules whose bookies run the real storage engine and whose client calls get cancelled."""
ENGINE_DRAWN = {**ENGINE, "draw_tunables": True}
"""Engine and cancel schedules whose protocol tunables are drawn too (shorter timeouts)."""
CANCEL = {"cancel": True}
"""Schedules whose client calls get cancelled (model bookies)."""

# mutation -> (scenario, or None: the seed picks one, as the command line's search does;
# schedules allowed, rules that may catch it[, schedule options])
CASES: dict[
    str, tuple[str | None, int, set[str]] | tuple[str | None, int, set[str], dict[str, bool]]
] = {
    "no_fence_on_recovery_reads": (
        "recovery_races_writer",
        300,
        {"ack_beyond_close", "acked_entry_lost", "close_disagrees", "read_not_in_ledger"},
    ),
    "timeout_counts_as_absent": (
        "recovery_races_writer",
        300,
        {"ack_beyond_close", "acked_entry_lost", "close_disagrees", "read_not_in_ledger"},
    ),
    "recovery_starts_at_lac": (
        "ensemble_change_then_crash",
        1000,
        {"foreign_error", "recovery_failed", "acked_entry_lost", "stalled"},
    ),
    "out_of_order_ack": ("writer_under_faults", 50, {"ack_out_of_order"}),
    "log_fences_only_last_ledger": (
        "log_duel",
        300,
        {
            "log_record_lost",
            "log_reader_skipped",
            "log_writers_overlap",
            "log_order",
            "log_readers_disagree",
            "stalled",
        },
    ),
    "log_sends_across_roll_at_once": ("log_duel", 600, {"log_hole"}),
    "roll_acks_before_listing": ("log_duel", 100, {"ack_unnamed"}),
    "barrier_stops_at_lac": ("sm_register", 100, {"sm_read_not_linearizable"}),
    "ensemble_acks_before_writing": ("ensemble_change_then_crash", 300, {"ack_unnamed"}),
    "takeover_ignores_last_timestamp": ("log_duel", 100, {"log_timestamp_decreased"}),
    "close_short_of_acks": ("volatile_force", 100, {"close_short_of_acks"}),
    "volatile_log_flush_skips_force": ("log_duel_volatile", 600, {"log_record_lost", "log_hole"}),
    "volatile_writer_ignores_restart": ("volatile_force", 600, {"volatile_ack_after_loss"}),
    "lost_answer_taken_for_rival": (
        "log_duel",
        300,
        {"log_listed_ledger_deleted", "recovery_failed", "log_ledger_missing", "log_record_lost"},
    ),
    "archive_marks_unsynced_output": (
        "archive_power_loss",
        50,
        {"archive_marked_records_lost"},
    ),
    "close_while_in_recovery": (
        "recovery_races_writer",
        300,
        {"writer_closed_recovering_ledger", "close_disagrees", "ack_beyond_close"},
    ),
    "failed_list_change_deletes_new_ledger": (
        "log_duel",
        300,
        {"log_listed_ledger_deleted", "recovery_failed", "log_record_lost"},
        CANCEL,
    ),
    "checkpoint_probes_after_freezing": (
        "disk_trouble",
        300,
        {"bookie_lost_entry", "bookie_forgot_fence"},
        ENGINE,
    ),
    "compaction_skips_unreadable": ("disk_trouble", 200, {"bookie_lost_entry"}, ENGINE),
    "statemachine_accepts_volatile": (
        "state_machine",
        100,
        {"sm_answer_lost", "sm_state_not_fold"},
    ),
    "stop_swallows_own_cancel": (
        "state_machine",
        300,
        {"cancel_swallowed", "sm_close_hangs", "stalled"},
        CANCEL,
    ),
    "deleted_ledger_forgets_fence": (
        None,
        300,
        {"bookie_forgot_fence", "log_record_lost", "log_ledger_missing"},
        ENGINE_DRAWN,
    ),
}


FOUND_AT = {
    "barrier_stops_at_lac": 38,
    "checkpoint_probes_after_freezing": 167,
    "compaction_skips_unreadable": 28,
    "ensemble_acks_before_writing": 72,
    "failed_list_change_deletes_new_ledger": 26,
    "log_fences_only_last_ledger": 6,
    "log_sends_across_roll_at_once": 53,
    "recovery_starts_at_lac": 295,
    "stop_swallows_own_cancel": 6,
    "takeover_ignores_last_timestamp": 7,
    "timeout_counts_as_absent": 196,
    "volatile_log_flush_skips_force": 46,
    "volatile_writer_ignores_restart": 116,
}
"""The first seed that breaks an invariant, for the mutations a search from 0 takes long to
find (``pytest -s`` prints it when it moved)."""


def _options(mutation: str) -> dict[str, bool]:
    """The schedule options of a case: its own, over production tunables."""
    _scenario, _budget, _rules, *more = CASES[mutation]
    return {"draw_tunables": False, **(more[0] if more else {})}


def _breaks(mutation: str, seed: int) -> Outcome:
    scenario = CASES[mutation][0]
    return run_schedule(seed, scenario, mutations_on=frozenset({mutation}), **_options(mutation))


def _caught(mutation: str, outcome: Outcome) -> bool:
    """Whether one of the case's rules broke."""
    return bool({v.rule for v in outcome.violations} & CASES[mutation][2])


def _search(mutation: str) -> tuple[int, Outcome]:
    scenario, budget, *_ = CASES[mutation]
    for seed in range(budget):
        outcome = _breaks(mutation, seed)
        if _caught(mutation, outcome):
            print(f"{mutation}: found by {scenario} seed {seed} after {seed + 1} schedule(s)")
            return seed, outcome
    pytest.fail(f"{mutation}: no invariant broke in {budget} schedules of {scenario}")


def _check_found(mutation: str, seed: int, outcome: Outcome) -> None:
    scenario = CASES[mutation][0]
    assert _caught(mutation, outcome), outcome.report(60)
    clean = run_schedule(seed, scenario, **_options(mutation))
    assert clean.ok, "the same schedule fails without the mutation:\n" + clean.report(60)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mutation", sorted(CASES))
def test_simulator_finds_planted_bug(mutation: str) -> None:
    known = FOUND_AT.get(mutation)
    outcome = None if known is None else _breaks(mutation, known)
    if known is not None and outcome is not None and _caught(mutation, outcome):
        _check_found(mutation, known, outcome)
        return
    if known is not None:
        print(f"{mutation}: seed {known} no longer breaks; searching from 0")
    _check_found(mutation, *_search(mutation))


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("mutation", sorted(FOUND_AT))
def test_simulator_finds_planted_bug_searching_from_seed_0(mutation: str) -> None:
    _check_found(mutation, *_search(mutation))

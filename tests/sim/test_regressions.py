"""Schedules that once broke a rule, replayed so the bug cannot come back.

Each test names the rule and pins the seed that found its violation; it also checks that the
schedule still exercises the situation (so a change to the schedule generator cannot turn
the test into one that passes trivially).
"""

from __future__ import annotations

from tests.sim.scenarios import Outcome, run_schedule


def _lines(outcome: Outcome) -> list[str]:
    return [text % args if args else text for _, text, args in outcome.trace]


def test_pending_entry_reaches_every_replacement_after_two_ensemble_changes() -> None:
    # Seed 93195: E=3 Qw=3 Qa=2. The first change replaces one of two failed bookies (no
    # second candidate), the second change replaces the other while a third fails. Entry 10
    # was pending throughout; it must be sent to the bookie that joined in the second change,
    # or it never reaches Qa and the writer stalls.
    outcome = run_schedule(93195)
    assert outcome.ok, outcome.report(80)
    lines = _lines(outcome)
    changes = [i for i, line in enumerate(lines) if "ensemble changed" in line]
    assert len(changes) >= 2, "the schedule no longer changes the ensemble twice"
    second = lines[changes[1]]
    assert "'b1'" in second, second
    after = lines[changes[1] :]
    assert any(line.startswith("w->b1 add L1 e10 ") for line in after), (
        "entry 10 was not resent to the bookie that joined in the second change"
    )
    assert "w ACK L1 e10" in after

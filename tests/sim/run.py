"""Command line of the simulator: search many schedules, or replay one seed exactly.

    python -m tests.sim --schedules 20000 --seed 1 --minutes 10 [--engine] [--cancel]
    python -m tests.sim --replay 1234 [--scenario NAME] [--mutation NAME] [--engine] [--cancel]

Schedule ``i`` of a search runs seed ``--seed + i``. A failing schedule prints its seed, the
scenario, the broken rules and the end of its trace; ``--replay SEED`` (with the same
``--scenario`` / ``--mutation`` / ``--production-tunables`` / ``--engine`` / ``--cancel``
flags) runs that schedule again,
prints its whole trace and checks that the run is identical to a second one.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from collections.abc import Sequence

from tests.sim.scenarios import NAMED_SCENARIOS, Outcome, run_schedule
from walog import mutations


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim", description="Deterministic protocol simulator."
    )
    parser.add_argument("--schedules", type=int, default=1000, help="schedules to run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first schedule")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--scenario", choices=sorted(NAMED_SCENARIOS), help="only this scenario")
    parser.add_argument(
        "--mutation",
        action="append",
        default=[],
        choices=sorted(mutations.KNOWN),
        help="plant a known protocol bug (repeatable); the search should find it",
    )
    parser.add_argument(
        "--production-tunables",
        action="store_true",
        help="keep recovery's read-ahead and batch sizes at their defaults (not drawn)",
    )
    parser.add_argument(
        "--engine",
        action="store_true",
        help="bookies run the real storage engine on simulated disks (tests/sim/engine.py)",
    )
    parser.add_argument(
        "--cancel",
        action="store_true",
        help="cancel client calls (takeovers, rolls, closes, truncation...) at random moments",
    )
    parser.add_argument("--replay", type=int, metavar="SEED", help="run one seed, full trace")
    parser.add_argument(
        "--trace-lines", type=int, default=120, help="trace lines shown per failure"
    )
    parser.add_argument(
        "--stop-on-failure", action="store_true", help="stop at the first failing schedule"
    )
    return parser


def replay(
    seed: int,
    scenario: str | None,
    mutations_on: frozenset[str],
    draw_tunables: bool = True,
    **options: bool,
) -> int:
    """Run one schedule twice, print its full trace; 1 when it fails or is not repeatable."""
    first = run_schedule(
        seed, scenario, mutations_on=mutations_on, draw_tunables=draw_tunables, **options
    )
    second = run_schedule(
        seed, scenario, mutations_on=mutations_on, draw_tunables=draw_tunables, **options
    )
    print(first.report(last_events=len(first.trace)))
    same = first.trace == second.trace
    print(f"\nresult: {'FAIL' if first.violations else 'ok'}; replay identical: {same}")
    return 0 if first.ok and same else 1


def search(
    first_seed: int,
    schedules: int,
    minutes: float | None,
    scenario: str | None,
    mutations_on: frozenset[str],
    trace_lines: int,
    stop_on_failure: bool,
    draw_tunables: bool = True,
    **options: bool,
) -> list[Outcome]:
    """Run schedules from ``first_seed``; print failures as they come and a summary."""
    started = time.monotonic()
    deadline = None if minutes is None else started + minutes * 60
    per_scenario: collections.Counter[str] = collections.Counter()
    per_rule: collections.Counter[str] = collections.Counter()
    failures: list[Outcome] = []
    ran = 0
    for seed in range(first_seed, first_seed + schedules):
        if deadline is not None and time.monotonic() > deadline:
            break
        outcome = run_schedule(
            seed, scenario, mutations_on=mutations_on, draw_tunables=draw_tunables, **options
        )
        ran += 1
        per_scenario[outcome.scenario] += 1
        if not outcome.ok:
            failures.append(outcome)
            per_rule.update({v.rule for v in outcome.violations})
            print(f"\nFAILED {outcome.report(trace_lines)}\n", flush=True)
            if stop_on_failure:
                break
    elapsed = time.monotonic() - started
    print(
        f"{ran} schedules (seeds {first_seed}..{first_seed + ran - 1}) in {elapsed:.1f}s, "
        f"{ran / max(elapsed, 1e-9):.0f}/s; mutations: {sorted(mutations_on) or 'none'}"
    )
    print("  by scenario: " + ", ".join(f"{k}={v}" for k, v in sorted(per_scenario.items())))
    if failures:
        print(f"  {len(failures)} failed; rules broken: {dict(per_rule)}")
        print("  failing seeds: " + " ".join(str(o.seed) for o in failures[:50]))
    else:
        print("  no invariant broken")
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (1 when a schedule failed)."""
    args = _parser().parse_args(argv)
    mutations_on = frozenset(args.mutation)
    options = {"engine": args.engine, "cancel": args.cancel}
    if args.replay is not None:
        return replay(
            args.replay, args.scenario, mutations_on, not args.production_tunables, **options
        )
    failures = search(
        args.seed,
        args.schedules,
        args.minutes,
        args.scenario,
        mutations_on,
        args.trace_lines,
        args.stop_on_failure,
        not args.production_tunables,
        **options,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

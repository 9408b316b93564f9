"""``python -m tests.chaos --minutes N --seed S``: long chaos searches from the shell.

Runs one chaos round after another (seeds S, S+1, ...) until the time is used up or a
round breaks a rule; prints each round's summary and, for a failing round, the seed, the
violations and the nemesis schedule, then exits 1. Run it from the repository root.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.harness import ChaosConfig, run_chaos, standalone_zookeeper


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and search."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="keep running rounds for this long (default: one round)",
    )
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="length of each round's fault phase"
    )
    parser.add_argument("--bookies", type=int, default=5)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--quorum", default="3,3,2", help="E,Qw,Qa (e.g. 3,2,2)")
    parser.add_argument(
        "--durability",
        default="PERSISTENT",
        choices=["PERSISTENT", "VOLATILE"],
        help="the log's durability (VOLATILE needs E = Qw)",
    )
    parser.add_argument(
        "--mutation",
        action="append",
        default=[],
        help="plant a test-only protocol bug in the writers (repeatable)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dirs of passed rounds")
    args = parser.parse_args(argv)
    ensemble, write, ack = (int(part) for part in args.quorum.split(","))
    deadline = None if args.minutes is None else time.monotonic() + args.minutes * 60
    seed, rounds = args.seed, 0
    with standalone_zookeeper() as zookeeper:
        while True:
            config = ChaosConfig(
                seed=seed,
                seconds=args.seconds,
                bookies=args.bookies,
                writers=args.writers,
                ensemble_size=ensemble,
                write_quorum=write,
                ack_quorum=ack,
                durability=args.durability,
                mutations=tuple(args.mutation),
            )
            work = Path(tempfile.mkdtemp(prefix=f"walog-chaos-{seed}-"))
            result = run_chaos(config, work, zookeeper)
            rounds += 1
            if not result.ok:
                print(result.report(), flush=True)
                return 1
            print(f"ok {result.summary()}", flush=True)
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
            seed += 1
            if deadline is None or time.monotonic() >= deadline:
                print(f"{rounds} rounds passed", flush=True)
                return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m tests.hosts.nemesis --minutes N --seed S``: one mixed-fault run across hosts.

Needs root (network namespaces, a tmpfs mount) and a C compiler (the EIO library). Prints
the run's totals; when a rule is broken, the violations, the schedule and what was carried
out, and exits 1 (the work directory is kept). Run it from the repository root.

Clean-up: at the end the HostCluster stops every process and removes the hosts, the tmpfs
is unmounted and the work directory removed (kept with ``--keep`` or after a failure).
After a SIGKILL, the next run (or any HostCluster) kills what was left in the hosts'
namespaces and deletes them, unmounts the tmpfs and removes the work directory, all found
by the dead process's id in their names; the bookies stop by themselves (``--exit-with``)
and the other processes die with this one (parent-death signal).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from tests.hosts.nemesis.run import WORK_PREFIX, MixedConfig, run_mixed
from walog.testing.netns import HostNetworkError, check_can_make_hosts
from walog.testing.tempdirs import owned_temp_dir


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run once, print the totals."""
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.nemesis", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the fault phase")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    try:
        check_can_make_hosts()
    except HostNetworkError as exc:
        print(f"cannot build hosts here: {exc}", file=sys.stderr)
        return 2
    work = owned_temp_dir(WORK_PREFIX)
    result = run_mixed(MixedConfig(seed=args.seed, seconds=args.minutes * 60), work)
    print(result.report() if not result.ok else f"ok seed={args.seed} {result.summary()}")
    if result.ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work directory kept: {work}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

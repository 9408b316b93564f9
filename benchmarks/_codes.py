"""The ``--both`` flag of the benchmarks that measure a compiled path against its pure-Python
twin: the script runs itself twice, compiled first, then with ``WALOG_PURE_PYTHON=1``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def add_both_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """Give ``parser`` the ``--both`` flag, measuring ``what`` both ways."""
    parser.add_argument(
        "--both",
        action="store_true",
        help=f"measure the compiled {what}, then pure Python (WALOG_PURE_PYTHON=1)",
    )


def run_both(script: str) -> None:
    """Run ``script`` with this process's arguments (without ``--both``), compiled, then in
    pure Python."""
    argv = [a for a in sys.argv[1:] if a != "--both"]
    for pure in ("0", "1"):
        env = {**os.environ, "WALOG_PURE_PYTHON": pure}
        subprocess.run([sys.executable, script, *argv], env=env, check=True)

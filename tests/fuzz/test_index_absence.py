"""Byte flips in ``index/data.mdb`` never make an acknowledged entry absent.

Ledger recovery counts NO_SUCH_ENTRY and NO_SUCH_LEDGER from enough bookies as proof that
an entry was never acknowledged. So whatever one flipped byte does to the LMDB index of a
stopped bookie, the restarted bookie either refuses to start with a clear
:class:`StorageIOError`, or answers every acknowledged entry with the entry itself or
IO_ERROR, never with absence, still refuses plain adds to its fenced ledgers and adds with
a wrong master key. It never dies: the index file is checked before LMDB maps it
(bookie/storage/lmdb_check.py), since LMDB follows damaged page numbers into SIGBUS or SIGSEGV. The
checks run in child processes (``index_flips.py``) so that a crash is counted, not fatal.

The store (``index_flips.build``) holds ledger 1 (enough entries for a multi-page B-tree)
and fenced ledger 2 in entry logs, ledger 3 only in the journal after the checkpoint
mark, and ledger 4 fenced without entries. Seeds are deterministic: a failure names the
seed, the byte and the xor.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.index_flips import build

REPO = Path(__file__).resolve().parents[2]
DEFAULT_FLIPS = 60
SLOW_FLIPS = 2000
_CRASHES = (-signal.SIGBUS, -signal.SIGSEGV)


@pytest.fixture(scope="module")
def acked_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("acked")
    asyncio.run(build(path))
    yield path


def _run(store: Path, flips: int) -> dict[str, int]:
    """Check seeds ``0 .. flips - 1`` in child processes, a new one after each crash."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    outcomes: dict[str, int] = {}
    seed = 0
    while seed < flips:
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.fuzz.index_flips",
                str(store),
                str(seed),
                str(flips - seed),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=900,
        )
        started = None
        for line in child.stdout.splitlines():
            word, number, *rest = line.split(" ", 2)
            if word == "START":
                started = int(number)
            elif word == "SEED":
                outcome = rest[0].split()[0]
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                seed = int(number) + 1
            elif word == "FAIL":
                pytest.fail(f"seed {number}: {' '.join(rest)}")
        if child.returncode == 0:
            break
        assert child.returncode in _CRASHES and started is not None, (
            f"worker failed (rc {child.returncode}): {child.stderr[-2000:]}"
        )
        outcomes["crashed"] = outcomes.get("crashed", 0) + 1
        seed = started + 1
    assert sum(outcomes.values()) == flips, outcomes
    assert "crashed" not in outcomes, f"a bookie core died on a damaged index: {outcomes}"
    return outcomes


def test_index_byte_flips_never_crash_nor_report_an_acknowledged_entry_absent(
    acked_store: Path,
) -> None:
    outcomes = _run(acked_store, DEFAULT_FLIPS)
    print(f"{DEFAULT_FLIPS} flips: {outcomes}")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_index_byte_flips_never_crash_nor_report_an_acknowledged_entry_absent_many(
    acked_store: Path,
) -> None:
    outcomes = _run(acked_store, SLOW_FLIPS)
    print(f"{SLOW_FLIPS} flips: {outcomes}")

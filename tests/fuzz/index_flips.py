"""Worker for ``test_index_absence``: flip one byte of ``index/data.mdb`` in a copy of a
store, restart a bookie core on it and check that no acknowledged entry is reported
absent. Runs in a child process (``python -m tests.fuzz.index_flips STORE FIRST COUNT``)
so that a process crash (LMDB reading past the end of a damaged file: SIGBUS) would be
recorded by the parent as a crash instead of ending the test run.

Prints one line per seed: ``SEED <n> <outcome>``, or ``FAIL <n> <reason>`` and exits 1.
"""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
import sys
import tempfile
from pathlib import Path

import structlog

from bookie.storage.journal_files import StorageIOError
from tests.unit.bookie.helpers import KEY, OTHER_KEY, add, open_core, payload
from walog.wire.status import Status

SIZE = 64
#: Acknowledged entries per ledger; ledger 3 lives in the journal after the mark only.
ACKED = {1: range(400), 2: range(1), 3: range(20)}
#: Fenced ledgers (4 has no entries at all).
FENCED = (2, 4)


async def build(path: Path) -> None:
    """Write the pristine store in ``path``."""
    core = await open_core(path)
    for ledger_id in (1, 2):
        for entry_id in ACKED[ledger_id]:
            data = payload(ledger_id, entry_id, SIZE)
            status, _ = await add(core, ledger_id, entry_id, data=data)
            assert status is Status.OK
    for ledger_id in FENCED:
        status, _, _ = await core.fence(ledger_id, KEY)
        assert status is Status.OK
    await core.checkpoint()
    for entry_id in ACKED[3]:
        status, _ = await add(core, 3, entry_id, data=payload(3, entry_id, SIZE))
        assert status is Status.OK
    await core.abandon()


async def _check_restart(path: Path) -> str:
    try:
        core = await open_core(path)
    except StorageIOError:
        return "refused"
    try:
        for ledger_id, entries in ACKED.items():
            for entry_id in entries:
                status, records = await core.read(ledger_id, entry_id, entry_id)
                assert status in (Status.OK, Status.IO_ERROR), (
                    f"acknowledged entry {ledger_id}:{entry_id} reported as {status.name}"
                )
                for record in records:
                    assert record.data == payload(ledger_id, record.entry_id, SIZE), "corrupt"
        for ledger_id in FENCED:
            status, _, _ = await core.fence(ledger_id, KEY)
            assert core.is_fenced(ledger_id) or status is Status.IO_ERROR, (
                f"fence of ledger {ledger_id} forgotten"
            )
            refused, _ = await add(core, ledger_id, 7, data=payload(ledger_id, 7, SIZE))
            assert refused is not Status.OK, f"plain add to fenced ledger {ledger_id} accepted"
        wrong, _ = await add(core, 1, 1000, key=OTHER_KEY)
        assert wrong is not Status.OK, "an add with a wrong master key was accepted"
        return "started"
    finally:
        await core.close()


def flip(store: Path, seed: int) -> tuple[int, int, str]:
    """Damage a copy of ``store`` as ``seed`` says and check it; ``(offset, xor, outcome)``.

    Half of the offsets are drawn among the file's non-zero bytes (page headers, keys,
    values), where a flip does the most; the other half anywhere in the file.
    """
    rng = random.Random(seed)
    raw = (store / "index" / "data.mdb").read_bytes()
    if rng.random() < 0.5:
        offset = rng.choice([i for i, byte in enumerate(raw) if byte])
    else:
        offset = rng.randrange(len(raw))
    xor = rng.randrange(1, 256)
    damaged = bytearray(raw)
    damaged[offset] ^= xor
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(store, copy)
        (copy / "index" / "data.mdb").write_bytes(bytes(damaged))
        return offset, xor, asyncio.run(_check_restart(copy))


def main() -> None:
    """``STORE FIRST COUNT``: check seeds ``FIRST .. FIRST + COUNT - 1``."""
    store, first, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    for seed in range(first, first + count):
        print(f"START {seed}", flush=True)
        try:
            offset, xor, outcome = flip(store, seed)
        except AssertionError as exc:
            print(f"FAIL {seed} {exc}", flush=True)
            sys.exit(1)
        print(f"SEED {seed} {outcome} byte {offset} ^= {xor:#04x}", flush=True)


if __name__ == "__main__":
    main()

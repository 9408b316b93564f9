"""Archive scenarios: the archive job's publish step on a host that loses power.

The real staging check and publish step (walog/spark/archive_publish.py) run on a
:class:`tests.sim.files.SimFiles`; "Spark" writes the staged files without syncing them, as
it does. The host loses power at a call the seed draws (or after the run), which drops what
the disk did not hold; a run that had not marked the ledgers archived is run again, and the
host loses power once more. The log's mark lives in the metadata store, which the host's
power loss does not touch. Then every record of a ledger marked archived must be on the
disk (rule ``archive_marked_records_lost``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import PurePosixPath

from tests.sim.files import PowerLoss, SimFiles
from tests.sim.world import World
from walog.spark.archive_publish import SUCCESS, publish, staged_write_finished

ROOT = PurePosixPath("/data/archive")
STAGING = ROOT / "_staging" / "intent"
CALLS_PER_RUN = 70
"""A run makes fewer calls than this: a crash point drawn up to it may fall after the run."""


async def archive_power_loss(world: World) -> None:
    """Archive one intent's ledgers, lose power at a drawn point, rerun if unmarked, lose
    power again, check that a mark never outlives the records it vouches for."""
    rng = world.rng
    files = SimFiles(rng, world.trace)
    files.make_dirs(ROOT)
    ledger_ids = list(range(1, rng.randint(1, 4) + 1))
    staged: dict[PurePosixPath, bytes] = {}  # under STAGING; ledgers without records: none
    for ledger_id in ledger_ids:
        if rng.random() < 0.85:
            for part in range(rng.randint(1, 3)):
                name = PurePosixPath(f"ledger={ledger_id}", f"part-{part:05d}.parquet")
                staged[name] = f"L{ledger_id} part {part} records".encode()
    for name in sorted({p.parent for p in staged}):
        if rng.random() < 0.3:  # an aborted run's leftovers, on the disk or not
            files.write_file(ROOT / name / "part-99999.parquet", b"aborted")
    marked: list[str] = []

    def run() -> None:
        if not staged_write_finished(files, STAGING):
            files.remove_tree(STAGING)
            for name, data in staged.items():
                files.write_file(STAGING / name, data)
            files.write_file(STAGING / SUCCESS, b"")
        names = [f"ledger={i}" for i in ledger_ids]
        publish(files, ROOT, STAGING, names, lambda: marked.append("archived_through"))
        world.trace.log(f"MARKED ledgers {ledger_ids} archived")
        files.remove_tree(STAGING)

    files.crash_at(rng.randint(1, CALLS_PER_RUN))
    with contextlib.suppress(PowerLoss):
        run()
    files.power_loss()
    if not marked:
        try:
            run()
        except (PowerLoss, OSError) as exc:
            world.history.violate("archive_run_failed", f"the rerun failed: {exc!r}")
            return
        files.power_loss()
    lost = [
        str(ROOT / name)
        for name, data in sorted(staged.items())
        if files.read_file(ROOT / name) != data
    ]
    if marked and lost:
        world.history.violate(
            "archive_marked_records_lost",
            f"ledgers {ledger_ids} marked archived, after a power loss {lost} are not there",
        )


ARCHIVE_SCENARIOS: dict[str, Callable[[World], Awaitable[None]]] = {
    "archive_power_loss": archive_power_loss,
}

__all__ = ["ARCHIVE_SCENARIOS", "archive_power_loss"]

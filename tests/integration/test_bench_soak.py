"""``walog bench --soak`` end to end: a local cluster written to at full speed through a log
whose retention deletes old ledgers (walog.bench.soak)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from walog.bench import main


@pytest.mark.slow  # two minutes of appends at full speed, and the cluster around them
@pytest.mark.timeout(600)
def test_a_full_speed_soak_with_retention_loses_no_bookie_and_keeps_disk_use_bounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        ["--soak", "2", "--soak-rate", "full", "--json", "--no-progress", "--data-dir",
         str(tmp_path)]
    )  # fmt: skip
    out = capsys.readouterr().out
    results = json.loads(out.strip().splitlines()[-1])
    assert status == 0, results["soak_failures"]
    assert results["soak_failures"] == [] and results["soak_bookies_lost"] == 0
    assert results["soak_rate"] == "full" and results["soak_entries"] > 0
    # Retention, not the bench, deleted the old ledgers.
    assert results["soak_ledgers_deleted_by_retention"] > 0
    assert len(results["soak_disk_by_minute"]) >= 2
    assert results["soak_disk_bound_mib"].keys() == {"bookie-0", "bookie-1", "bookie-2"}
    assert "| minute | entries/s | bookie-0, MiB |" in out

"""``python -m walog.spark.bench``: the scan, the sink on local[2] and on a standalone cluster."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from walog.spark.bench import main
from walog.testing import LocalCluster

pytestmark = pytest.mark.spark


def test_bench_refuses_standalone_workers_without_the_sink_they_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Refused before anything is measured: no minute of scanning lost to a typo.
    with pytest.raises(SystemExit) as exit_info:
        main(["--metadata", "sqlite:///nowhere.db", "--standalone-workers", "2"])
    assert exit_info.value.code == 2
    assert "--standalone-workers times the sink: add --sink" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--sink"])
    assert "--sink needs --metadata" in capsys.readouterr().err


@pytest.mark.slow  # a scan, three sink writes, then a standalone cluster and three more
@pytest.mark.timeout(600)
def test_bench_reports_the_sink_on_local_spark_and_on_a_standalone_cluster(
    cluster: LocalCluster,
) -> None:
    command = [
        sys.executable, "-m", "walog.spark.bench", "--metadata", cluster.metadata_uri,
        "--total-mb", "4", "--warmup", "0", "--repeats", "1",
        "--sink", "--standalone-workers", "2",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rates = {
        name: float(rate)
        for name, rate in re.findall(r"^(spark [^:]+): ([0-9.]+) MB/s", done.stdout, re.M)
    }
    assert set(rates) == {
        "spark batch scan",
        "spark sink",
        "spark sink, standalone cluster (2 workers)",
    }, done.stdout
    assert all(rate > 0 for rate in rates.values()), rates

"""One local Spark session for every Spark test (starting one costs seconds).

Executors' Python workers must run the venv's interpreter and import walog from this
checkout, so both are put in the environment before the JVM starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

import walog.spark  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def spark_env() -> dict[str, str]:
    """Environment for Spark processes: the venv's Python, this checkout importable."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
    }


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A ``local[2]`` session (a failed task is tried up to 3 times) with the walog data
    source registered."""
    os.environ.update(spark_env())
    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("walog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    walog.spark.register(session)
    yield session
    session.stop()

"""One local Spark session for every Spark test (starting one costs seconds).

Executors' Python workers must run the venv's interpreter and import walog from this
checkout, so both are put in the environment before the JVM starts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

import walog.spark  # noqa: E402
from walog.testing.spark import spark_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


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

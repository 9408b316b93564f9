"""PySpark integration: the ``walog`` data source (batch and streaming) and the archive job.

::

    import walog.spark

    walog.spark.register(spark)
    df = (
        spark.read.format("walog")
        .option("metadata", "sqlite:///var/lib/walog/meta.db")
        .option("log", "orders")
        .load()
    )

Importing this package needs ``pyspark`` and ``pyarrow``; the rest of walog does not.

- ``source``: the data source; ``options``: its options, checked on the driver;
- ``plan``: pure planning of reads (bounds, partitions, offsets); ``batch``: batch reads;
  ``stream``: streaming reads; ``arrow``: the schema and the Arrow batches;
- ``sink``: writing to a log (batch and streaming);
- ``archive``: the archive job, closed ledgers to Parquet; ``archive_publish`` and
  ``archive_files``: putting its output in place durably before ledgers are marked archived;
  ``archive_command``: ``walog archive``;
- ``session``: the Spark sessions the commands start, their log sent to a file;
- ``bench``: scan and sink throughput.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the ``walog`` data source with a Spark session.

    Afterwards ``spark.read.format("walog")`` and ``spark.readStream.format("walog")`` read
    logs (see ``docs/spark.md`` for the options).
    """
    from walog.spark.source import WalogDataSource

    spark.dataSource.register(WalogDataSource)


__all__ = ["register"]

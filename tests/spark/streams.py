"""Streaming reads of a log to Parquet, run to the end of what is there (``availableNow``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery


def stream_available_now(
    spark: SparkSession, out: Path, checkpoint: Path, **options: str
) -> StreamingQuery:
    """Stream the ``walog`` source with ``options`` into Parquet at ``out`` until it has
    read what was there; the finished query (failed unless it finished cleanly)."""
    reader = spark.readStream.format("walog")
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "AvailableNow query did not finish"
    assert query.exception() is None
    return query

"""The ``walog`` Python data source: batch and streaming reads of a log."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from walog.spark.arrow import SCHEMA_DDL
from walog.spark.batch import WalogBatchReader, freeze_worker_objects
from walog.spark.options import ReadOptions, WriteOptions, check_columns
from walog.spark.sink import WalogBatchWriter, WalogStreamWriter
from walog.spark.stream import WalogStreamReader


class WalogDataSource(DataSource):
    """Reads a walog log as rows ``ledger_id long, entry_id long, slot int, timestamp
    timestamp, data binary``, one row per record, in log order within a partition.

    Options are checked when the source is created (see :class:`ReadOptions`), so a bad one
    fails on the driver with one clear error instead of in every task.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.options = dict(options)
        # Spark creates data sources in a reused Python worker of their own.
        freeze_worker_objects()

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("walog")``."""
        return "walog"

    def schema(self) -> str:
        """The fixed columns (a user-given schema must match them)."""
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader."""
        return WalogBatchReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The micro-batch stream reader."""
        return WalogStreamReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch sink: appends the DataFrame's rows to the log, once.

        Raises:
            ValueError: overwrite mode, bad options, or columns the sink cannot write.
        """
        return WalogBatchWriter(self._write_options(schema, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The streaming sink: appends each micro-batch's rows to the log, once."""
        return WalogStreamWriter(self._write_options(schema, overwrite, streaming=True))

    def _write_options(
        self, schema: StructType, overwrite: bool, *, streaming: bool
    ) -> WriteOptions:
        if overwrite:
            raise ValueError(
                "a walog log is append-only: write with mode 'append' (or outputMode "
                "'append'), not overwrite"
            )
        options = WriteOptions.parse(self.options, streaming=streaming)
        check_columns(schema, options)
        return options


__all__ = ["WalogDataSource"]

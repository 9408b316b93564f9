"""Options of the ``walog`` Spark data source, parsed and checked once on the driver.

Spark hands options over as a case-insensitive mapping of strings. Every bad value raises
one ``ValueError`` naming the option and what it accepts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from walog.spark.plan import DEFAULT_MAX_ENTRIES_PER_PARTITION, Bound, parse_bound


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name}={raw!r}: expected 'true' or 'false'")
    return value == "true"


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"option {name}={raw!r}: expected a whole number >= 1")
    return value


def _positive_float(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"option {name}={raw!r}: expected a number of seconds > 0")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class ReadOptions:
    """The parsed options (plain data: pickled to executors with every partition plan).

    Attributes:
        metadata: metadata store URI of the cluster (option ``metadata``, required).
        log: the log's name (option ``log``, required).
        start: ``startPosition`` (default ``earliest``).
        end: ``endPosition`` for batch reads (default ``latest``).
        max_entries_per_partition: ``maxEntriesPerPartition``: a ledger longer than this is
            read by several partitions.
        fail_on_data_loss: ``failOnDataLoss`` (default true): a truncated start raises
            instead of skipping to the first surviving record.
        password: ``password``: the log's ledger password (UTF-8 text, default empty).
        consumer_name: ``consumerName``: streaming only; a durable cursor committed to the
            metadata store as micro-batches complete, which retention respects.
        max_records_per_trigger: ``maxRecordsPerTrigger``: streaming only; records per
            micro-batch at most.
        timeout: ``timeout``: seconds to wait for the metadata store (default 10).
    """

    metadata: str
    log: str
    start: Bound = "earliest"
    end: Bound = "latest"
    max_entries_per_partition: int = DEFAULT_MAX_ENTRIES_PER_PARTITION
    fail_on_data_loss: bool = True
    password: bytes = b""
    consumer_name: str | None = None
    max_records_per_trigger: int | None = None
    timeout: float = 10.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Parse Spark's option mapping (keys case-insensitive, as Spark passes them).

        Raises:
            ValueError: a required option is missing or a value is malformed.
        """
        lowered = {str(k).lower(): v for k, v in options.items()}
        for required in ("metadata", "log"):
            if not lowered.get(required):
                raise ValueError(
                    f"the walog data source needs option {required!r}: "
                    '.option("metadata", URI).option("log", NAME)'
                )
        consumer = lowered.get("consumername")
        if consumer is not None and not str(consumer).strip():
            raise ValueError("option consumerName is empty")
        max_entries = _positive_int(
            lowered, "maxEntriesPerPartition", DEFAULT_MAX_ENTRIES_PER_PARTITION
        )
        assert max_entries is not None
        return cls(
            metadata=str(lowered["metadata"]),
            log=str(lowered["log"]),
            start=parse_bound(str(lowered.get("startposition", "earliest")), "startPosition"),
            end=parse_bound(str(lowered.get("endposition", "latest")), "endPosition"),
            max_entries_per_partition=max_entries,
            fail_on_data_loss=_flag(lowered, "failOnDataLoss", True),
            password=str(lowered.get("password", "")).encode(),
            consumer_name=None if consumer is None else str(consumer).strip(),
            max_records_per_trigger=_positive_int(lowered, "maxRecordsPerTrigger", None),
            timeout=_positive_float(lowered, "timeout", 10.0),
        )


__all__ = ["ReadOptions"]

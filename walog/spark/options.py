"""Options of the ``walog`` Spark data source (reads and the sink), parsed and checked once
on the driver.

Spark hands options over as a case-insensitive mapping of strings. Every bad value raises
one ``ValueError`` naming the option and what it accepts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pyspark.sql.types import BinaryType, StringType, StructType

from walog.ledger.options import LedgerOptions
from walog.log.records import RecordBatch
from walog.log.sink import DEFAULT_ORPHAN_GRACE
from walog.log.writer import LogWriterConfig
from walog.spark.plan import DEFAULT_MAX_ENTRIES_PER_PARTITION, Bound, parse_bound

DEFAULT_MAX_ENTRY_BYTES = LogWriterConfig().max_entry_bytes


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


def _whole_int(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name}={raw!r}: expected a whole number") from None


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


def _millis(raw: object) -> int:
    """``startingTimestamp``: a whole number of milliseconds since the epoch, >= 0."""
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"option startingTimestamp={raw!r}: expected milliseconds since the epoch, a "
            "whole number >= 0 (as Kafka's option)"
        )
    return value


def _require_target(lowered: Mapping[str, Any], who: str) -> None:
    """Raise one ``ValueError`` naming ``metadata`` or ``log`` when either is missing."""
    for required in ("metadata", "log"):
        if not lowered.get(required):
            raise ValueError(
                f'{who} needs option {required!r}: .option("metadata", URI).option("log", NAME)'
            )


@dataclasses.dataclass(frozen=True, slots=True)
class BookieAccess:
    """How executors reach TLS or token-protected bookies: the client's ``tls`` and
    ``auth_token`` (options ``tlsCa``, ``tlsCert``, ``tlsKey``, ``authTokenFile``: paths on
    every executor; only paths travel with the plan, never the secrets)."""

    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    auth_token_file: str | None = None

    @classmethod
    def parse(cls, lowered: Mapping[str, str]) -> BookieAccess:
        """From Spark's options, lower-cased."""
        access = cls(
            tls_ca=lowered.get("tlsca"),
            tls_cert=lowered.get("tlscert"),
            tls_key=lowered.get("tlskey"),
            auth_token_file=lowered.get("authtokenfile"),
        )
        if (access.tls_cert is None) != (access.tls_key is None):
            raise ValueError("options tlsCert and tlsKey go together")
        return access

    def options(self) -> dict[str, str]:
        """The Spark options that carry this access (the inverse of :meth:`parse`)."""
        named = {
            "tlsCa": self.tls_ca,
            "tlsCert": self.tls_cert,
            "tlsKey": self.tls_key,
            "authTokenFile": self.auth_token_file,
        }
        return {name: path for name, path in named.items() if path is not None}

    def connect_kwargs(self) -> dict[str, Any]:
        """``tls`` and ``auth_token`` for ``walog.connect`` (files read now).

        Raises:
            ValueError: a file is missing or unreadable (named).
        """
        from walog.transport.credentials import credentials_from_files

        try:
            tls, token = credentials_from_files(
                self.tls_ca, self.tls_cert, self.tls_key, self.auth_token_file
            )
        except ValueError as exc:  # parse() paired cert and key: the token file failed
            raise ValueError(f"option authTokenFile={self.auth_token_file}: {exc}") from exc
        return {"tls": tls, "auth_token": token}


@dataclasses.dataclass(frozen=True, slots=True)
class ReadOptions:
    """The parsed options (plain data: pickled to executors with every partition plan).

    Attributes:
        metadata: metadata store URI of the cluster (option ``metadata``, required).
        log: the log's name (option ``log``, required).
        start: ``startPosition`` (default ``earliest``).
        starting_timestamp_ms: ``startingTimestamp``: milliseconds since the epoch, as
            Kafka's option; reading starts at the first record stamped at or after it
            (``Log.position_at``; the log's end when there is none). Not with
            ``startPosition``. A streaming query's consumer cursor, once committed, wins.
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
        timeout: ``timeout``: seconds to wait for the metadata store, to connect and for
            each call (``Timeouts.metadata``; default 10).
        access: TLS and token options for the bookies (:class:`BookieAccess`).
    """

    metadata: str
    log: str
    start: Bound = "earliest"
    starting_timestamp_ms: int | None = None
    end: Bound = "latest"
    max_entries_per_partition: int = DEFAULT_MAX_ENTRIES_PER_PARTITION
    fail_on_data_loss: bool = True
    password: bytes = b""
    consumer_name: str | None = None
    max_records_per_trigger: int | None = None
    timeout: float = 10.0
    access: BookieAccess = dataclasses.field(default_factory=BookieAccess)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Parse Spark's option mapping (keys case-insensitive, as Spark passes them).

        Raises:
            ValueError: a required option is missing or a value is malformed.
        """
        lowered = {str(k).lower(): v for k, v in options.items()}
        _require_target(lowered, "the walog data source")
        consumer = lowered.get("consumername")
        if consumer is not None and not str(consumer).strip():
            raise ValueError("option consumerName is empty")
        max_entries = _positive_int(
            lowered, "maxEntriesPerPartition", DEFAULT_MAX_ENTRIES_PER_PARTITION
        )
        assert max_entries is not None
        starting = lowered.get("startingtimestamp")
        if starting is not None and "startposition" in lowered:
            raise ValueError(
                "options startingTimestamp and startPosition both say where to start: give one"
            )
        return cls(
            metadata=str(lowered["metadata"]),
            log=str(lowered["log"]),
            start=parse_bound(str(lowered.get("startposition", "earliest")), "startPosition"),
            starting_timestamp_ms=None if starting is None else _millis(starting),
            end=parse_bound(str(lowered.get("endposition", "latest")), "endPosition"),
            max_entries_per_partition=max_entries,
            fail_on_data_loss=_flag(lowered, "failOnDataLoss", True),
            password=str(lowered.get("password", "")).encode(),
            consumer_name=None if consumer is None else str(consumer).strip(),
            max_records_per_trigger=_positive_int(lowered, "maxRecordsPerTrigger", None),
            timeout=_positive_float(lowered, "timeout", 10.0),
            access=BookieAccess.parse({str(k): str(v) for k, v in lowered.items()}),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class WriteOptions:
    """The sink's parsed options (plain data, pickled to executors).

    Attributes:
        metadata: metadata store URI (option ``metadata``, required).
        log: the log written to (option ``log``, required; created when missing).
        sink_id: ``sinkId``: batches of one sink id are linked at most once each.
        batch_id: ``batchId``: a batch job's number for its ``sinkId`` (needs it).
        reset_sink_id: ``resetSinkId``: start ``sinkId`` over from this query's (or job's)
            batches when the log's record of it is another query's or past this job's
            batch, instead of refusing the write; a query's own record is kept.
        serialize: ``serialize``: ``json`` writes whole rows as JSON; None needs ``data``.
        link_order: ``linkOrder``: ``partition`` (default) links the tasks' ledgers in
            partition order, copying on the driver those created out of that order;
            ``written`` links them in the order they were created (never copies; each
            partition's rows stay together and in order).
        ledger: ``ensembleSize``, ``writeQuorum``, ``ackQuorum``, ``password``.
        max_entry_bytes: ``maxEntryBytes``: records are packed into entries up to this.
        orphan_grace: ``orphanGraceSeconds``: age after which an unlinked sink ledger of no
            linked batch is deleted (a commit refuses ledgers older than half of it).
        timeout: ``timeout``: seconds to wait for the metadata store, to connect and for
            each call (``Timeouts.metadata``).
        access: TLS and token options for the bookies (:class:`BookieAccess`).
    """

    metadata: str
    log: str
    sink_id: str | None = None
    batch_id: int | None = None
    reset_sink_id: bool = False
    serialize: str | None = None
    link_order: str = "partition"
    ledger: LedgerOptions = dataclasses.field(default_factory=LedgerOptions)
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    orphan_grace: float = DEFAULT_ORPHAN_GRACE
    timeout: float = 10.0
    access: BookieAccess = dataclasses.field(default_factory=BookieAccess)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
        """Parse Spark's option mapping (keys case-insensitive).

        Raises:
            ValueError: a required option is missing or a value is malformed.
        """
        lowered = {str(k).lower(): str(v) for k, v in options.items()}
        _require_target(lowered, "the walog sink")
        sink_id = lowered.get("sinkid")
        if sink_id is not None and not sink_id.strip():
            raise ValueError("option sinkId is empty")
        if streaming and sink_id is None:
            raise ValueError(
                "writeStream.format('walog') needs option 'sinkId': a name for this query's "
                "output, kept across restarts, so each micro-batch is linked into the log once"
            )
        batch_id = None
        if streaming and "batchid" in lowered:
            raise ValueError("option batchId is for batch jobs; a stream numbers its own")
        if not streaming and (sink_id is None) != ("batchid" not in lowered):
            raise ValueError(
                "options sinkId and batchId go together on a batch job: the log links "
                "batch N of a sink id once, and only after every lower batch id"
            )
        reset_sink_id = _flag(lowered, "resetSinkId", False)
        if reset_sink_id and sink_id is None:
            raise ValueError("option resetSinkId needs option sinkId: the sink id to start over")
        if "batchid" in lowered:
            raw = lowered["batchid"]
            if not raw.strip().isdigit():
                raise ValueError(f"option batchId={raw!r}: expected a whole number >= 0")
            batch_id = int(raw)
        serialize = lowered.get("serialize")
        if serialize is not None and serialize.strip().lower() != "json":
            raise ValueError(f"option serialize={serialize!r}: the one format is 'json'")
        link_order = lowered.get("linkorder", "partition").strip().lower()
        if link_order not in ("partition", "written"):
            raise ValueError(
                f"option linkOrder={lowered['linkorder']!r}: expected 'partition' or 'written'"
            )
        # Whole numbers here; LedgerOptions checks their order (and names a bad one).
        defaults = LedgerOptions()
        ensemble = _whole_int(lowered, "ensembleSize", defaults.ensemble_size)
        write_quorum = _whole_int(lowered, "writeQuorum", defaults.write_quorum)
        ack_quorum = _whole_int(lowered, "ackQuorum", defaults.ack_quorum)
        max_entry = _positive_int(lowered, "maxEntryBytes", DEFAULT_MAX_ENTRY_BYTES)
        assert max_entry is not None
        RecordBatch(max_entry, 1)  # validates the bound
        return cls(
            metadata=lowered["metadata"],
            log=lowered["log"],
            sink_id=None if sink_id is None else sink_id.strip(),
            batch_id=batch_id,
            reset_sink_id=reset_sink_id,
            serialize=None if serialize is None else "json",
            link_order=link_order,
            ledger=LedgerOptions(
                ensemble_size=ensemble,
                write_quorum=write_quorum,
                ack_quorum=ack_quorum,
                password=lowered.get("password", "").encode(),
            ),
            max_entry_bytes=max_entry,
            orphan_grace=_positive_float(lowered, "orphanGraceSeconds", DEFAULT_ORPHAN_GRACE),
            timeout=_positive_float(lowered, "timeout", 10.0),
            access=BookieAccess.parse(lowered),
        )


def check_columns(schema: StructType, options: WriteOptions) -> None:
    """Refuse a DataFrame the sink cannot write, naming the offending columns.

    Raises:
        ValueError: no ``data`` column, ``data`` of another type, or other columns without
            ``serialize=json``.
    """
    if options.serialize == "json":
        return
    names = [f.name for f in schema.fields]
    extra = ", ".join(repr(n) for n in names if n != "data")
    if "data" not in names:
        raise ValueError(
            f"the walog sink needs a column 'data' (binary or string); got {extra}: rename "
            "the payload column to 'data', or set option serialize=json to write each row "
            "as a JSON object"
        )
    if extra:
        raise ValueError(
            f"the walog sink writes one column 'data' (binary or string); "
            f"{extra} would not be written: select only 'data', or set option "
            "serialize=json to write each row as a JSON object"
        )
    kind = schema["data"].dataType
    if not isinstance(kind, (BinaryType, StringType)):
        raise ValueError(
            f"column 'data' is {kind.simpleString()}; the walog sink writes binary or string "
            "(cast it, or set option serialize=json)"
        )


__all__ = ["ReadOptions", "WriteOptions", "check_columns"]

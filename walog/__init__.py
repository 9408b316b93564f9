"""walog: a replicated write-ahead log for Python services, built on BookKeeper-style ledgers.

This module is the public API; everything else may change. docs/api.md is its reference.

The package, top to bottom (docs/architecture.md draws the layers):

- ``client``: the sync API (``walog.connect``); ``aio``: the same as coroutines;
- ``log``: logs made of ledgers; ``ledger``: the ledger protocol, client side;
- ``transport``: connections to bookies; ``metadata``: the metadata stores;
- ``config``: a client's settings; ``settings``: how a program declares a setting once;
  ``config_file``: settings from flags, the environment and a TOML file;
  ``wire``: what clients and bookies share;
- ``recipes``: the replicated state machine; ``spark``: the Spark data source, sink and
  archive job; ``autorecovery``: re-replication of lost bookies' ledgers;
  ``maintenance``: ``walog maintain``, which keeps every log to its stored settings;
- ``cli``: the ``walog`` commands, with ``status``, ``quickstart`` and ``tables``; ``main``:
  the ``walog`` program, which runs them;
  ``bench``: ``walog bench``; ``testing``: local clusters for tests and demos;
- ``metrics``: Prometheus metrics; ``errors``: the exceptions, rooted at ``WalogError``;
- shared helpers: ``_loggers`` (logging), ``_loop`` (the event loop walog starts),
  ``_loop_thread`` (the loop thread behind the sync facades), ``_futures`` (the futures
  they return), ``_sinks`` (where results go), ``latency`` (a bookie's add-stage
  histograms), ``memory`` (keeping freed memory), ``mutations`` (test-only switches that
  plant known bugs), ``format_versions`` (the rule every reader applies to the format
  version it finds), ``_version``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from walog._version import __version__ as __version__

if TYPE_CHECKING:
    # What the lazy table below resolves at run time, spelled out for type checkers (a
    # test keeps the two in step): they see each walog.X as what it is, not as Any.
    from walog import aio, recipes, spark, testing
    from walog.client import Client, connect
    from walog.config import ClientConfig, Timeouts
    from walog.errors import (
        BookieError,
        BookieReadOnlyError,
        BookieRestartedError,
        BookieUnavailableError,
        DataLossError,
        DigestMismatchError,
        LedgerClosedError,
        LedgerFencedError,
        MetadataConflictError,
        MetadataError,
        NewerFormatError,
        NoSuchEntryError,
        NoSuchLedgerError,
        NoSuchLogError,
        NotEnoughBookiesError,
        RecordTooLargeError,
        SequenceError,
        SequenceTooOldError,
        UnauthorizedError,
        WalogError,
        WriterFencedError,
    )
    from walog.ledger.entry import Entry
    from walog.ledger.options import LedgerOptions
    from walog.ledger.placement import PlacementPolicy
    from walog.ledger.sync import LedgerReader, LedgerWriter
    from walog.log.lag import ReaderLag
    from walog.log.log_config import ArchivePolicy, LogConfig
    from walog.log.position import Position, Record, Segment
    from walog.log.registration import WriterInfo
    from walog.log.retention import RetentionPolicy, RollPolicy
    from walog.log.subscriptions import SubscriptionInfo
    from walog.log.sync import Leadership, Log, LogReader, LogWriter
    from walog.log.writer import LogWriterConfig
    from walog.metadata.layout import LedgerMetadata
    from walog.transport.credentials import TlsConfig
    from walog.wire.durability import Durability

# Public name -> module that defines it. Imported on first use, so `import walog` stays
# cheap for processes (bookies, Spark executors) that need only a part of it.
_EXPORTS: dict[str, str] = {
    "connect": "walog.client",
    "Client": "walog.client",
    "LedgerWriter": "walog.ledger.sync",
    "LedgerReader": "walog.ledger.sync",
    "PlacementPolicy": "walog.ledger.placement",
    "Durability": "walog.wire.durability",
    "Entry": "walog.ledger.entry",
    "LedgerMetadata": "walog.metadata.layout",
    "Log": "walog.log.sync",
    "Leadership": "walog.log.sync",
    "ReaderLag": "walog.log.lag",
    "LogWriter": "walog.log.sync",
    "LogReader": "walog.log.sync",
    "Position": "walog.log.position",
    "Record": "walog.log.position",
    "Segment": "walog.log.position",
    "SubscriptionInfo": "walog.log.subscriptions",
    "WriterInfo": "walog.log.registration",
    "RollPolicy": "walog.log.retention",
    "LogConfig": "walog.log.log_config",
    "ArchivePolicy": "walog.log.log_config",
    "RetentionPolicy": "walog.log.retention",
    "LogWriterConfig": "walog.log.writer",
    "LedgerOptions": "walog.ledger.options",
    "ClientConfig": "walog.config",
    "Timeouts": "walog.config",
    "TlsConfig": "walog.transport.credentials",
    "WalogError": "walog.errors",
    "LedgerFencedError": "walog.errors",
    "WriterFencedError": "walog.errors",
    "LedgerClosedError": "walog.errors",
    "NotEnoughBookiesError": "walog.errors",
    "RecordTooLargeError": "walog.errors",
    "SequenceError": "walog.errors",
    "SequenceTooOldError": "walog.errors",
    "NoSuchLedgerError": "walog.errors",
    "NoSuchEntryError": "walog.errors",
    "NoSuchLogError": "walog.errors",
    "MetadataConflictError": "walog.errors",
    "UnauthorizedError": "walog.errors",
    "DataLossError": "walog.errors",
    "BookieError": "walog.errors",
    "BookieUnavailableError": "walog.errors",
    "BookieReadOnlyError": "walog.errors",
    "BookieRestartedError": "walog.errors",
    "DigestMismatchError": "walog.errors",
    "MetadataError": "walog.errors",
    "NewerFormatError": "walog.errors",
}

# A literal list, so type checkers know what is exported (a test compares it with the table).
__all__ = [
    "ArchivePolicy",
    "BookieError",
    "BookieReadOnlyError",
    "BookieRestartedError",
    "BookieUnavailableError",
    "Client",
    "ClientConfig",
    "DataLossError",
    "DigestMismatchError",
    "Durability",
    "Entry",
    "Leadership",
    "LedgerClosedError",
    "LedgerFencedError",
    "LedgerMetadata",
    "LedgerOptions",
    "LedgerReader",
    "LedgerWriter",
    "Log",
    "LogConfig",
    "LogReader",
    "LogWriter",
    "LogWriterConfig",
    "MetadataConflictError",
    "MetadataError",
    "NewerFormatError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NoSuchLogError",
    "NotEnoughBookiesError",
    "PlacementPolicy",
    "Position",
    "ReaderLag",
    "Record",
    "RecordTooLargeError",
    "RetentionPolicy",
    "RollPolicy",
    "Segment",
    "SequenceError",
    "SequenceTooOldError",
    "SubscriptionInfo",
    "Timeouts",
    "TlsConfig",
    "UnauthorizedError",
    "WalogError",
    "WriterFencedError",
    "WriterInfo",
    "aio",
    "connect",
    "recipes",
    "spark",
    "testing",
]


# The subpackages reached as attributes of walog (also imported on first use).
_SUBPACKAGES: dict[str, str] = {
    "aio": "walog.aio",
    "recipes": "walog.recipes",
    "spark": "walog.spark",
    "testing": "walog.testing",
}


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(_SUBPACKAGES[name])
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'walog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

"""walog: a replicated write-ahead log for Python services, built on BookKeeper-style ledgers.

This module is the public API; everything else may change. See docs/ for the guide.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

# Public name -> module that defines it. Imported on first use, so `import walog` stays
# cheap for processes (bookies, Spark executors) that need only a part of it.
_EXPORTS: dict[str, str] = {
    "connect": "walog.client",
    "Client": "walog.client",
    "LedgerWriter": "walog.client",
    "LedgerReader": "walog.client",
    "Durability": "walog.wire.durability",
    "Entry": "walog.ledger.entry",
    "LedgerMetadata": "walog.metadata.layout",
    "Log": "walog.log.sync",
    "LogWriter": "walog.log.sync",
    "LogReader": "walog.log.sync",
    "Position": "walog.log.position",
    "Record": "walog.log.position",
    "Segment": "walog.log.position",
    "RollPolicy": "walog.log.retention",
    "RetentionPolicy": "walog.log.retention",
    "WalogError": "walog.errors",
    "LedgerFencedError": "walog.errors",
    "WriterFencedError": "walog.errors",
    "LedgerClosedError": "walog.errors",
    "NotEnoughBookiesError": "walog.errors",
    "NoSuchLedgerError": "walog.errors",
    "NoSuchEntryError": "walog.errors",
    "NoSuchLogError": "walog.errors",
    "MetadataConflictError": "walog.errors",
    "UnauthorizedError": "walog.errors",
    "DataLossError": "walog.errors",
    "BookieError": "walog.errors",
}

__all__ = sorted([*_EXPORTS, "aio", "testing", "spark"])
try:
    # The version lives in pyproject.toml only; the installed distribution's metadata has it.
    __version__ = importlib.metadata.version("walog")
except importlib.metadata.PackageNotFoundError:  # run from a source tree never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    if name in ("aio", "testing", "spark"):
        return importlib.import_module(f"walog.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'walog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

"""Helpers for the storage engine tests: open a real store in a directory, add entries."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import bookie.storage.journal_writer
from bookie.storage.config import StorageConfig
from bookie.storage.engine import BookieCore
from walog.wire.digest import entry_digest, master_key
from walog.wire.durability import Durability
from walog.wire.status import Status

REPO = Path(__file__).resolve().parents[3]
KEY = master_key(b"secret")
OTHER_KEY = master_key(b"other")


def config(path: Path, **overrides: Any) -> StorageConfig:
    """A store in ``path`` that checkpoints and flushes only when a test asks."""
    settings: dict[str, Any] = {
        "checkpoint_interval_s": 3600.0,
        "volatile_flush_interval_s": 3600.0,
    }
    settings.update(overrides)
    return StorageConfig(data_dir=path, **settings)


async def open_core(path: Path, **overrides: Any) -> BookieCore:
    """Open a store in ``path``."""
    return await BookieCore.open(config(path, **overrides))


def payload(ledger_id: int, entry_id: int, size: int = 64) -> bytes:
    """Deterministic entry payload, different for every (ledger, entry)."""
    seed = f"{ledger_id}:{entry_id}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


async def add(
    core: BookieCore,
    ledger_id: int,
    entry_id: int,
    *,
    lac: int | None = None,
    data: bytes | None = None,
    key: bytes = KEY,
    durability: Durability = Durability.PERSISTENT,
    recovery: bool = False,
) -> tuple[Status, int]:
    """Add an entry with a correct digest (lac defaults to entry_id - 1)."""
    lac = entry_id - 1 if lac is None else lac
    data = payload(ledger_id, entry_id) if data is None else data
    digest = entry_digest(ledger_id, entry_id, lac, data)
    return await core.add(
        ledger_id, entry_id, lac, data, digest, key, recovery=recovery, durability=durability
    )


async def read_all(core: BookieCore, ledger_id: int, last: int) -> dict[int, bytes]:
    """Every entry of ``0..last`` the store serves, one read per entry."""
    found: dict[int, bytes] = {}
    for entry_id in range(last + 1):
        status, records = await core.read(ledger_id, entry_id, entry_id)
        if status is Status.OK:
            (record,) = records
            assert record.digest == entry_digest(ledger_id, entry_id, record.lac, record.data)
            found[entry_id] = record.data
    return found


def compiled_add_module() -> ModuleType:
    """The compiled add-path checks (bookie/storage/_fastadd.c); the calling test fails with one
    line when they are not built (tests never fall back to pure Python silently)."""
    return _compiled("_fastadd")


def compiled_journal_module() -> ModuleType:
    """The compiled journal writer (bookie/storage/_fastjournal.c); the calling test fails with one
    line when it is not built (tests never fall back to pure Python silently)."""
    return _compiled("_fastjournal")


def compiled_replay_module() -> ModuleType:
    """The compiled journal replay (bookie/storage/_fastreplay.c); the calling test fails with
    one line when it is not built (tests never fall back to pure Python silently)."""
    return _compiled("_fastreplay")


def python_journal_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Journals started from now on write through the pure-Python writer, whose
    ``os.write`` and ``os.fdatasync`` a test can replace (the compiled writer calls the C
    library's directly)."""
    monkeypatch.setattr(bookie.storage.journal_writer, "_fastjournal", None)


def probe_pure_python(probe: str, values: Sequence[str | None]) -> dict[str | None, str]:
    """What the Python code ``probe`` prints in a fresh interpreter run with each of
    ``values`` as ``WALOG_PURE_PYTHON`` (None: unset), by value."""
    seen = {}
    for value in values:
        env = {k: v for k, v in os.environ.items() if k != "WALOG_PURE_PYTHON"}
        if value is not None:
            env["WALOG_PURE_PYTHON"] = value
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        out = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        seen[value] = out.stdout.strip()
    return seen


def _compiled(name: str) -> ModuleType:
    try:
        module = importlib.import_module(f"bookie.storage.{name}")
    except ImportError as exc:
        problem = str(exc)
    else:
        return module
    pytest.fail(
        f"bookie.storage.{name} is not built ({problem}): run `pip install -e .` "
        "(needs a C compiler and the Python headers)",
        pytrace=False,
    )

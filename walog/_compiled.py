"""Compiled hot paths, chosen once at import.

The compiled modules are C extensions built by ``pip install -e .`` (setup.py): the log
writer's per-record path (``walog.log._fastrecords``) and the bookie's storage paths
(``bookie.storage._fast*``). Each returns exactly what its pure-Python version returns.
``WALOG_PURE_PYTHON=1`` selects the pure-Python code everywhere, as does a checkout where an
extension is not built.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def pure_python_asked() -> bool:
    """True when ``WALOG_PURE_PYTHON`` is set (to anything but ``0``)."""
    return os.environ.get("WALOG_PURE_PYTHON", "0") not in ("", "0")


def compiled_module(name: str) -> ModuleType | None:
    """The compiled module ``name`` (``walog.log._fastrecords``, ...) when it is built,
    unless ``WALOG_PURE_PYTHON`` asks for pure Python; else None."""
    if pure_python_asked():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


__all__ = ["compiled_module", "pure_python_asked"]

"""walog's version, read once from the installed distribution's metadata: pyproject.toml is
the one place it is written. ``walog.__version__`` re-exports it; the bookie imports it from
here, not through ``walog``'s public module."""

from __future__ import annotations

import importlib.metadata

try:
    __version__ = importlib.metadata.version("walog")
except importlib.metadata.PackageNotFoundError:  # run from a source tree never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]

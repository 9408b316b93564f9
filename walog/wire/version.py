"""The software version a bookie announces (``Info``, its registration), read as walog's.

Here rather than from ``walog.__version__`` so that the bookie, which stays on the wire
layer, never imports the client package.
"""

from __future__ import annotations

import importlib.metadata

try:
    # The version lives in pyproject.toml only; the installed distribution's metadata has it.
    VERSION = importlib.metadata.version("walog")
except importlib.metadata.PackageNotFoundError:  # run from a source tree never installed
    VERSION = "0+unknown"

__all__ = ["VERSION"]

"""Run the walog benchmarks from a source checkout: ``python benchmarks/run.py [ARGS]``.

The same as ``walog bench [ARGS]`` (the code lives in :mod:`walog.bench`); for example
``python benchmarks/run.py --peers --profile --report docs/benchmarks.md`` regenerates
``docs/benchmarks.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from walog.bench import main

if __name__ == "__main__":
    raise SystemExit(main())

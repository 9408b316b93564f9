"""What a bookie and the ``walog`` command load when they start: every test run starts
hundreds of them, and so do the machines that run walog."""

from __future__ import annotations

import subprocess
import sys


def test_a_bookie_and_the_walog_command_start_without_rich() -> None:
    # structlog imports rich (for its console's tracebacks) as soon as it can find it: a sixth
    # of a bookie's imports, and walog logs JSON, never using it. import-linter, which needs
    # rich, lives in .venv/tools (see ./test).
    code = (
        "import sys, bookie.main, walog.main\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'rich', 'importlinter'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", "installed beside the project: " + done.stdout

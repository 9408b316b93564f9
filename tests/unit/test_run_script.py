"""./run, the script that sets up the virtualenv and installs walog (``./test`` sources it):
its install stamp is computed from every file the install is built from."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run_function(name: str) -> str:
    """The output of ./run's shell function ``name`` (./run sourced, as ./test does)."""
    done = subprocess.run(
        ["bash", "-c", 'set -euo pipefail; source "$1"; "$2"', "run", str(REPO / "run"), name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"./run's {name} failed: {done.stderr}"
    return done.stdout


def test_the_install_stamp_covers_every_source_of_the_compiled_extensions() -> None:
    listed = [Path(line) for line in _run_function("walog_build_inputs").splitlines()]
    sources = {*REPO.glob("bookie/**/_*.c"), *REPO.glob("bookie/**/_*.h")}
    sources |= {*REPO.glob("walog/**/_*.c"), *REPO.glob("walog/**/_*.h")}
    assert sources, "no C extension sources found"
    assert set(listed) == {REPO / "pyproject.toml", REPO / "setup.py", *sources}
    assert re.fullmatch(r"[0-9a-f]{64}\n", _run_function("walog_build_digest"))


def test_an_install_says_what_it_is_installing_while_it_installs() -> None:
    pip_output = (
        "Collecting grpcio==1.66.1 (from walog==0.1)\n"
        "  Downloading grpcio-1.66.1-cp311-manylinux.whl (5.8 MB)\n"
        "Building wheels for collected packages: walog\n"
        "  Building editable for walog (pyproject.toml): started\n"
        "Installing collected packages: grpcio, walog\n"
        "Successfully installed grpcio-1.66.1 walog-0.1\n"
    )
    done = subprocess.run(
        [
            "bash",
            "-c",
            'set -euo pipefail; source "$1"; walog_pip_progress',
            "run",
            str(REPO / "run"),
        ],
        input=pip_output,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "    collecting grpcio==1.66.1 (from walog==0.1)",
        "    building wheels for collected packages: walog",
        "    building editable for walog (pyproject.toml): started",
        "    installing grpcio, walog",
        "    successfully installed grpcio-1.66.1 walog-0.1",
    ]

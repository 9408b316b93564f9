"""Type checkers see walog's real public types, not ``Any``: the lazy import table of
``walog/__init__.py`` has a ``TYPE_CHECKING`` mirror, and mypy --strict accepts a user
program (tests/typing/user_program.py) and reveals the real types in it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import walog

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "tests" / "typing" / "user_program.py"


def test_the_type_checking_imports_mirror_the_lazy_table() -> None:
    tree = ast.parse((REPO / "walog" / "__init__.py").read_text())
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
    )
    imported: dict[str, str] = {}
    for node in ast.walk(guarded):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                imported[alias.name] = node.module or ""
    lazy = dict(walog._EXPORTS)
    lazy.update({name: "walog" for name in ("aio", "recipes", "spark", "testing")})
    assert imported == lazy
    assert walog.__all__ == sorted(lazy)  # a literal list: type checkers read it


def test_mypy_strict_sees_real_types_in_a_user_program() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(PROGRAM)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    notes = [line for line in done.stdout.splitlines() if "Revealed type" in line]
    assert len(notes) == 9, done.stdout
    types = [line.split('Revealed type is "', 1)[1] for line in notes]
    # Only a coroutine's own send/yield types may be Any (walog.aio.connect).
    assert not [t for t in types if "Any" in t.replace("Coroutine[Any, Any,", "")], types
    revealed = "\n".join(types)
    for expected in (
        "def (metadata_uri: str",
        "walog.client.Client",
        "-> walog.client.Client",
        "walog.log.position.Position",
        "walog.log.position.Record | None",
        "walog.errors.MetadataError",
        "walog.errors.BookieUnavailableError",
        "walog.transport.credentials.TlsConfig",
    ):
        assert expected in revealed, (expected, revealed)

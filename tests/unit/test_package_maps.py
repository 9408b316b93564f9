"""Every package's ``__init__`` says what its modules are: a reader opening a package learns
from its docstring which module holds what (the generated protobuf modules excepted)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    init.parent
    for top in ("walog", "bookie")
    for init in (REPO / top).rglob("__init__.py")
    if "__pycache__" not in init.parts
)


def _members(package: Path) -> list[str]:
    """The package's public modules and subpackages (no ``__main__``, nothing private,
    nothing generated)."""
    names = [
        path.stem
        for path in package.glob("*.py")
        if not path.stem.startswith("_") and "_pb2" not in path.stem
    ]
    names += [sub.name for sub in package.iterdir() if (sub / "__init__.py").is_file()]
    return sorted(names)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_package_docstring_names_every_module(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = [
        name
        for name in _members(package)
        if not re.search(rf"``{name}``|:mod:`[\w.]*\b{name}`", docstring)
    ]
    assert missing == [], (
        f"{package.relative_to(REPO)}/__init__.py does not say what these modules are: "
        f"{', '.join(missing)}"
    )

"""The package's layering holds: the import contracts of pyproject.toml, checked by
import-linter (``[tool.importlinter]``; docs/architecture.md explains the layers).

Each contract is one test named after its id. Imports under ``if TYPE_CHECKING:`` and inside
functions count like any other: a loop through a type-only import is still a loop.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"][
    "contracts"
]


def _lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "lint-imports"
    if not tool.exists():
        pytest.fail(f"import-linter is not installed in {tool.parent} (install the dev extra)")
    return subprocess.run(
        [str(tool), "--no-cache", "--no-logo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        # The packages are read from the working directory, never from an installed copy.
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
    )


def test_every_layer_of_the_package_is_under_a_contract() -> None:
    layered: set[str] = set()
    for contract in CONTRACTS:
        for layer in contract.get("layers", []):
            layered.update(name.strip() for name in layer.replace("|", ":").split(":"))
    foundation = next(c for c in CONTRACTS if c["id"] == "foundation-below-all")
    layered.update(foundation["source_modules"])
    top_level = {
        f"walog.{path.stem}" if path.is_file() else f"walog.{path.name}"
        for path in (REPO / "walog").iterdir()
        if (path.suffix == ".py" and path.stem not in ("__init__", "__main__"))
        or (path / "__init__.py").exists()
    }
    assert top_level - layered == set(), "modules of walog in no layer of pyproject.toml"


@pytest.mark.parametrize("contract", [c["id"] for c in CONTRACTS])
def test_import_contract_is_kept(contract: str) -> None:
    result = _lint_imports(REPO, "--contract", contract, "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_type_checking_import_loop_counts_as_a_loop(tmp_path: Path) -> None:
    package = tmp_path / "looped"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "server.py").write_text("from looped.native import Native\n")
    (package / "native.py").write_text(
        textwrap.dedent(
            """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from looped.server import Server
            Native = object
            """
        )
    )
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [tool.importlinter]
            root_packages = ["looped"]

            [[tool.importlinter.contracts]]
            id = "loops"
            name = "no loops"
            type = "acyclic_siblings"
            ancestors = ["looped"]
            """
        )
    )
    result = _lint_imports(tmp_path, "pyproject.toml")
    assert result.returncode != 0, result.stdout
    assert "native" in result.stdout and "server" in result.stdout, result.stdout

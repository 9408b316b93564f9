"""The package's layering holds: the import contracts of pyproject.toml, checked by
import-linter (``[tool.importlinter]``; docs/architecture.md explains the layers), and no
import loop anywhere.

Each contract is one test named after its id. Imports under ``if TYPE_CHECKING:`` and inside
functions count like any other: a loop through a type-only import is still a loop. So does a
module imported by name (``importlib.import_module("walog.x")``), which import-linter does
not see: the loop tests read those too (tests/imports.py).
"""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.imports import (
    TOOLS,
    ComputedModuleName,
    Edge,
    imports_by_name,
    module_files,
    module_loops,
    package_loops,
    statement_imports,
)

REPO = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"][
    "contracts"
]
PACKAGES = ("walog", "bookie")
BOOKIE_BY_NAME: Edge = ("walog.main", "bookie.main")
"""``walog bookie`` runs the bookie's program: the one import by name of walog that crosses
into the bookie."""


def _declared_bookie_imports() -> set[Edge]:
    """Where walog may name the bookie: :data:`BOOKIE_BY_NAME`, and the imports the contract
    ``client-without-bookie`` lists as exceptions."""
    contract = next(c for c in CONTRACTS if c["id"] == "client-without-bookie")
    pairs = (line.split(" -> ") for line in contract.get("ignore_imports", []))
    return {BOOKIE_BY_NAME, *((a.strip(), b.strip()) for a, b in pairs)}


@functools.cache
def _imports() -> frozenset[Edge]:
    """Every import between the modules of walog and bookie, by statement or by name."""
    by_name = imports_by_name(module_files(REPO, PACKAGES))
    return frozenset(statement_imports(REPO, PACKAGES) | by_name)


def _lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    tool = TOOLS / "bin" / "lint-imports"
    if not tool.exists():
        pytest.fail(f"import-linter is not installed in {TOOLS} (./test installs it)")
    return subprocess.run(
        [sys.executable, str(tool), "--no-cache", "--no-logo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        # The packages are read from the working directory, never from an installed copy.
        env={"PYTHONPATH": f"{cwd}:{TOOLS}", "PATH": "/usr/bin:/bin"},
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


def test_no_import_loop_between_modules_type_checking_and_by_name_imports_included() -> None:
    assert module_loops(_imports()) == [], "modules that import each other"


def test_no_import_loop_between_packages_type_checking_and_by_name_imports_included() -> None:
    undeclared = _imports() - _declared_bookie_imports()
    assert package_loops(undeclared) == {}, "packages that import each other"


def test_walog_names_the_bookie_only_where_declared() -> None:
    crossing = {
        (a, b) for a, b in _imports() if a.split(".")[0] == "walog" and b.split(".")[0] == "bookie"
    }
    assert crossing == _declared_bookie_imports()


def _write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _loops_of(root: Path) -> tuple[list[list[str]], dict[str, list[list[str]]]]:
    edges = statement_imports(root, ["looped"]) | imports_by_name(module_files(root, ["looped"]))
    return module_loops(edges), package_loops(edges)


def test_an_import_by_name_counts_as_an_import(tmp_path: Path) -> None:
    _write_package(
        tmp_path,
        {
            "looped/__init__.py": "",
            "looped/tools/__init__.py": "",
            "looped/tools/archive.py": "from looped.cli.options import Parser\n",
            "looped/cli/__init__.py": "",
            "looped/cli/options.py": "Parser = object\n",
            "looped/cli/dispatch.py": """\
                import importlib

                TABLE = {"archive": "looped.tools.archive"}

                def run(name):
                    return importlib.import_module(TABLE[name])
                """,
        },
    )
    modules, packages = _loops_of(tmp_path)
    assert modules == []  # no module imports the dispatch...
    assert packages == {"looped": [["looped.cli", "looped.tools"]]}  # ...but cli <-> tools


def test_a_loop_through_a_package_init_counts_as_a_loop(tmp_path: Path) -> None:
    _write_package(
        tmp_path,
        {
            "looped/__init__.py": """\
                from typing import TYPE_CHECKING

                if TYPE_CHECKING:
                    from looped import spark
                """,
            "looped/spark/__init__.py": "from looped.spark.batch import Reader\n",
            "looped/spark/batch.py": "import looped\n\nReader = object\n",
        },
    )
    modules, _ = _loops_of(tmp_path)
    assert modules == [["looped", "looped.spark", "looped.spark.batch"]]


def test_a_computed_module_name_is_refused(tmp_path: Path) -> None:
    _write_package(
        tmp_path,
        {
            "looped/__init__.py": """\
                import importlib

                def load(name):
                    return importlib.import_module(f"looped.{name}")
                """,
        },
    )
    with pytest.raises(ComputedModuleName, match="computed name"):
        imports_by_name(module_files(tmp_path, ["looped"]))

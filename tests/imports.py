"""The import graph of packages as Python runs them, and the loops in it.

An edge is every import statement, those inside functions and under ``if TYPE_CHECKING:``
included (read by grimp, as import-linter reads them), and every module imported by name: a
string given to ``importlib.import_module``, ``importlib.util.find_spec``, ``__import__`` or
the bookie's ``compiled_module``. A module that passes such a function a variable counts as
importing every module named in its strings; a name computed from pieces (an f-string, a
``+``) is refused, since no one reading the code can tell what it imports.

Loops are looked for at every level: between modules (a package's ``__init__`` is the module
of the package's name, so ``walog`` -> ``walog.spark`` -> ... -> ``walog`` is a loop), and
between the children of each package, each child standing for itself and its descendants.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

BY_NAME = frozenset({"import_module", "find_spec", "__import__", "compiled_module"})
"""The functions that import the module a string names."""

Edge = tuple[str, str]


class ComputedModuleName(Exception):
    """A module is imported by a name computed at run time."""


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name (a package by its own)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


TOOLS = Path(sys.prefix) / "tools"
"""Where ./test installs import-linter and its grimp, apart from the project's packages."""


def statement_imports(root: Path, packages: Iterable[str]) -> set[Edge]:
    """The import statements between the modules of ``packages`` (grimp, run on ``root``
    in a process of its own so that it reads these files, not an installed copy)."""
    program = (
        "import grimp, json, sys\n"
        "graph = grimp.build_graph(*sys.argv[1:], cache_dir=None)\n"
        "print(json.dumps([[m, i] for m in sorted(graph.modules)"
        " for i in sorted(graph.find_modules_directly_imported_by(m))]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, *packages],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": f"{root}:{TOOLS}", "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"grimp (./test installs it in {TOOLS}) failed:\n{done.stderr}"
    return {(importer, imported) for importer, imported in json.loads(done.stdout)}


def _called_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _docstrings(tree: ast.Module) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef))]
    nodes += [n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)]
    return {
        id(node.body[0].value)
        for node in nodes
        if node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def imports_by_name(modules: Mapping[str, Path]) -> set[Edge]:
    """The imports by name between ``modules`` (names outside them, such as third-party
    packages or compiled extensions, are left out).

    Raises:
        ComputedModuleName: a module name is computed from pieces.
    """
    edges: set[Edge] = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        by_variable = False
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            if _called_name(call) not in BY_NAME or not call.args:
                continue
            target = call.args[0]
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                if target.value in modules:
                    edges.add((name, target.value))
            elif isinstance(target, ast.JoinedStr | ast.BinOp):
                raise ComputedModuleName(
                    f"{path}:{call.lineno}: a module imported by a computed name; name each "
                    "module it may import in a string"
                )
            else:
                by_variable = True
        if by_variable:
            docstrings = _docstrings(tree)
            edges |= {
                (name, node.value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and node.value in modules
                and node.value != name
            }
    return edges


def _strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The groups of nodes that reach each other (Tarjan's algorithm), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted((g for g in groups if len(g) > 1), key=len, reverse=True)


def _graph(edges: Iterable[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        if importer != imported:
            graph.setdefault(importer, set()).add(imported)
            graph.setdefault(imported, set())
    return graph


def module_loops(edges: Iterable[Edge]) -> list[list[str]]:
    """The modules that import each other, directly or not, one list per loop."""
    return _strongly_connected(_graph(edges))


def package_loops(edges: Iterable[Edge]) -> dict[str, list[list[str]]]:
    """Loops between the children of each package (``""``: between the top packages), a
    child standing for itself and its descendants; by package."""
    by_parent: dict[str, set[Edge]] = {}
    for importer, imported in edges:
        a, b = importer.split("."), imported.split(".")
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        if common == len(a) or common == len(b):
            continue  # between a package and its own descendant: a module loop, if any
        parent = ".".join(a[:common])
        child_a, child_b = ".".join(a[: common + 1]), ".".join(b[: common + 1])
        by_parent.setdefault(parent, set()).add((child_a, child_b))
    found = {parent: module_loops(pairs) for parent, pairs in sorted(by_parent.items())}
    return {parent: loops for parent, loops in found.items() if loops}


__all__ = [
    "BY_NAME",
    "ComputedModuleName",
    "imports_by_name",
    "module_files",
    "module_loops",
    "package_loops",
    "statement_imports",
]

"""No class in walog/ or bookie/ spans more than 600 lines: a class that large holds a
second job, which gets a class or module of its own (the ledger writer's ensemble change
and explicit LAC, the storage engine's checkpoints, the entry log being filled)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("walog", "bookie")
MAX_CLASS_LINES = 600


def class_spans(source: str) -> list[tuple[str, int, int]]:
    """Every class of a module, nested ones too: (qualified name, first line, lines)."""
    spans: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                end = child.end_lineno if child.end_lineno is not None else child.lineno
                spans.append((name, child.lineno, end - first + 1))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return spans


def test_class_spans_count_every_line_of_a_class_nested_ones_too() -> None:
    source = "@dataclass\nclass A:\n    x = 1\n\n    class B:\n        y = 2\n\n\nz = 3\n"
    assert class_spans(source) == [("A", 2, 6), ("A.B", 5, 2)]


def test_no_class_spans_more_than_600_lines() -> None:
    too_long = [
        f"{path.relative_to(REPO).as_posix()}:{line} {name} ({lines} lines)"
        for top in SOURCES
        for path in sorted((REPO / top).rglob("*.py"))
        if "_pb2" not in path.stem
        for name, line, lines in class_spans(path.read_text())
        if lines > MAX_CLASS_LINES
    ]
    assert too_long == [], (
        f"classes longer than {MAX_CLASS_LINES} lines (carve a second job out): "
        + "; ".join(too_long)
    )

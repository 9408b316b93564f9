"""The mutation table stays true: each test-only mutation (walog/mutations.py) is
read at a decision point of the protocol code, searched for by the simulator
(tests/sim/test_mutations.py) and listed in docs/correctness.md."""

from __future__ import annotations

import re
from pathlib import Path

from tests.sim.test_mutations import CASES
from walog import mutations

REPO = Path(__file__).resolve().parents[3]
_READ = re.compile(r"""mutations\.enabled\(\s*["'](\w+)["']\s*\)""")


def _decision_points() -> dict[str, list[str]]:
    """Mutation name -> the modules of walog and bookie that read it."""
    found: dict[str, list[str]] = {}
    for path in sorted([*(REPO / "walog").rglob("*.py"), *(REPO / "bookie").rglob("*.py")]):
        if path.name == "mutations.py":  # the switches themselves, not a decision point
            continue
        for name in _READ.findall(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(REPO)))
    return found


def test_every_mutation_is_read_at_a_decision_point() -> None:
    points = _decision_points()
    assert set(mutations.KNOWN) - set(points) == set(), "mutations no protocol code reads"
    assert set(points) - set(mutations.KNOWN) == set(), f"unknown mutations read: {points}"


def test_every_mutation_is_searched_for_by_the_simulator() -> None:
    assert set(CASES) == set(mutations.KNOWN)


def test_every_mutation_is_in_the_correctness_table() -> None:
    text = (REPO / "docs" / "correctness.md").read_text()
    table = text.split("## Mutation tests", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert listed == set(mutations.KNOWN)

"""The mutation table stays true: each test-only mutation (walog/mutations.py) is
read at a decision point of the code, searched for by the simulator
(tests/sim/test_mutations.py) or, outside what the simulator models, turned on by a named
test that shows the harm it does, and listed in docs/correctness.md."""

from __future__ import annotations

import re
from pathlib import Path

from tests.sim.test_mutations import CASES
from walog import mutations

REPO = Path(__file__).resolve().parents[3]
_READ = re.compile(r"""mutations\.enabled\(\s*["'](\w+)["']\s*\)""")

CAUGHT_BY_TESTS: dict[str, str] = {
    "verify_counts_unreadable_as_held": "tests/unit/test_autorecovery_rules.py::"
    "test_with_verify_counts_unreadable_as_held_an_unreadable_copy_is_held",
}
"""Mutations outside what the simulator models (auto-recovery): the test that turns each on
and shows the harm."""


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


def test_every_mutation_is_searched_for_by_the_simulator_or_a_named_test() -> None:
    assert set(CASES).isdisjoint(CAUGHT_BY_TESTS)
    assert set(CASES) | set(CAUGHT_BY_TESTS) == set(mutations.KNOWN)
    for name, test in CAUGHT_BY_TESTS.items():
        module, function = test.split("::")
        source = (REPO / module).read_text()
        found = re.search(
            rf"^(?:async )?def {function}\(.*?(?=^(?:async )?def |\Z)", source, re.M | re.S
        )
        assert found is not None, f"{test} does not exist"
        assert f'enabled_mutations("{name}")' in found.group(), f"{test} does not turn {name} on"


def test_every_mutation_is_in_the_correctness_table() -> None:
    text = (REPO / "docs" / "correctness.md").read_text()
    table = text.split("## Mutation tests", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert listed == set(mutations.KNOWN)

"""Code cites protocol rules by a heading of docs/protocol.md, never by a source document's
number (docs/protocol.md says how; docs/architecture.md maps the rules to modules)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTOCOL = REPO / "docs" / "protocol.md"
SOURCES = ("walog", "bookie")
SUFFIXES = {".py", ".pyi", ".c", ".h", ".proto"}

# A line break inside a comment or docstring, with the next line's comment marker.
_BREAK = re.compile(r"\s*\n\s*(?:#|//|\*(?!/))?\s*")
_CITATION = re.compile(r'docs/protocol\.md,\s*"([^"]+)"((?:\s*(?:,|and)\s*"[^"]+")*)')
_MORE = re.compile(r'"([^"]+)"')
_BY_NUMBER = re.compile(r"\bseeds? 00\d\b", re.IGNORECASE)


def _sources() -> list[Path]:
    return sorted(
        path
        for top in SOURCES
        for path in (REPO / top).rglob("*")
        if path.suffix in SUFFIXES and path.is_file()
    )


def _headings() -> set[str]:
    return {
        line.lstrip("#").strip()
        for line in PROTOCOL.read_text().splitlines()
        if line.startswith("#")
    }


def citations(text: str) -> list[str]:
    """The headings cited as ``(docs/protocol.md, "A")`` or ``(docs/protocol.md, "A" and
    "B")`` in ``text``, across line breaks of comments and docstrings."""
    joined = _BREAK.sub(" ", text)
    found = []
    for match in _CITATION.finditer(joined):
        found.append(match.group(1))
        found.extend(_MORE.findall(match.group(2)))
    return found


def test_citations_are_read_across_comment_line_breaks() -> None:
    text = '# the fence (docs/protocol.md, "Fencing\n    # reads") and "x"\n'
    text += '"""Quorums (docs/protocol.md, "Write quorums"\nand "Coverage")."""'
    assert citations(text) == ["Fencing reads", "Write quorums", "Coverage"]


def test_every_protocol_citation_in_the_code_names_a_heading_of_protocol_md() -> None:
    headings = _headings()
    cited = {
        (path.relative_to(REPO).as_posix(), name)
        for path in _sources()
        for name in citations(path.read_text())
    }
    assert cited, "no module cites docs/protocol.md"
    unknown = sorted(f"{path}: {name!r}" for path, name in cited if name not in headings)
    assert unknown == [], f"citations of headings docs/protocol.md does not have: {unknown}"


def test_no_module_or_page_cites_a_source_document_by_its_number() -> None:
    pages = [p for p in (REPO / "docs").glob("*.md") if p.name != "history.md"]
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in [*_sources(), *pages]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _BY_NUMBER.search(line)
    ]
    assert offenders == [], "cite docs/protocol.md by heading instead:\n" + "\n".join(offenders)

"""Hooks of the documentation site (mkdocs.yml ``hooks:``).

The docstrings cross-reference with Sphinx roles (``:class:`Client```); mkdocstrings renders
their text as is, so the site would show ``:class:`` before each name. The role is dropped
and the name kept as code; ``~a.b.C`` shows as ``C``, as Sphinx shows it.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def _name(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    """The page's HTML with Sphinx roles turned into plain code names."""
    return _ROLE.sub(_name, html)

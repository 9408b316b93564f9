"""The docs site's hook (mkdocs_hooks.py) shows Sphinx roles of docstrings as plain code."""

from __future__ import annotations

from mkdocs_hooks import on_page_content


def test_sphinx_role_is_dropped_and_the_name_kept_as_code() -> None:
    html = "Returns a :class:<code>walog.Client</code> (see :meth:<code>close</code>)."
    assert on_page_content(html) == (
        "Returns a <code>walog.Client</code> (see <code>close</code>)."
    )


def test_tilde_shows_only_the_last_part_of_the_name() -> None:
    html = "frames (:class:<code>~walog.transport.codec.BatchEncoder</code>)"
    assert on_page_content(html) == "frames (<code>BatchEncoder</code>)"


def test_code_without_a_role_is_left_alone() -> None:
    html = "<p>a ratio 1:2 and <code>x:y</code></p>"
    assert on_page_content(html) == html

"""Aligned plain-text tables for the human output of ``walog`` commands."""

from __future__ import annotations

from collections.abc import Sequence


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Lines of a table: the headers, then one line per row, columns padded to align.

    Numbers are not treated specially: callers format every cell as text. The last column
    is not padded, so lines carry no trailing spaces.
    """
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {list(row)} has {len(row)} cells, expected {len(headers)}")
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
        return "  ".join(padded).rstrip()

    return [line(headers), *(line(row) for row in rows)]


__all__ = ["render_table"]

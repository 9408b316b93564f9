"""Cost curves: how a cost grows with the work (``walog bench --curves``, ``--only curve-*``).

Each curve measures one cost at several sizes of the work (logs written at once, idle
readers, stored ledgers, ...), in one command, and says whether a stated bound holds. A
:class:`Curve` carries its table, the bound and the verdict; :func:`write_curves` puts each
measured curve into a Markdown page as a section of its own (between ``<!-- curve NAME -->``
markers, so the other curves and the rest of the page stay) with a plot under ``img/``.

The measurements themselves live in :mod:`walog.bench.curve_logs` (many logs, idle
readers), :mod:`walog.bench.curve_metadata` (metadata calls per operation) and
:mod:`walog.bench.curve_storage` (bookie memory and index, catch-up reads, GC and
compaction).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CURVES = (
    "curve-logs", "curve-idle", "curve-index", "curve-catchup", "curve-metadata", "curve-gc",
)  # fmt: skip
"""Curve names for ``--only``, in the order ``--curves`` measures them."""

Cell = float | int | str | None


@dataclasses.dataclass
class Curve:
    """One measured curve: a table whose first column is the size of the work.

    Attributes:
        name: its name in :data:`CURVES`, or ``NAME:PART`` for a second table of that
            curve's command.
        title: the section's heading.
        columns: the table's column headings (the first is the x axis).
        rows: one row per point, in the order of ``columns``.
        bound: the bound the curve must stay within, in words.
        holds: whether it held (None: no bound to judge).
        plot: ``(column, axis label)`` of the series plotted against the first column;
            series with the same axis label share an axis, a second label gets a right axis.
        log_x: plot the first column on a log scale.
        notes: paragraphs under the table (what was measured and how).
        command: the command line that measured it.
        uptime: ``uptime``'s line at the start.
        date: when it started (UTC).
    """

    name: str
    title: str
    columns: list[str]
    rows: list[list[Cell]] = dataclasses.field(default_factory=list)
    bound: str = ""
    holds: bool | None = None
    plot: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    log_x: bool = True
    notes: list[str] = dataclasses.field(default_factory=list)
    command: str = ""
    uptime: str = ""
    date: str = ""

    def __post_init__(self) -> None:
        if self.name.partition(":")[0] not in CURVES:
            raise ValueError(f"unknown curve {self.name!r}; choose from {', '.join(CURVES)}")
        for column, _ in self.plot:
            if column not in self.columns:
                raise ValueError(f"curve {self.name}: plotted column {column!r} is not a column")

    def column(self, heading: str) -> list[Cell]:
        """The values of one column, in row order."""
        index = self.columns.index(heading)
        return [row[index] for row in self.rows]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (:meth:`from_json` reads it back)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Curve:
        """The curve :meth:`to_json` wrote."""
        fields = dict(data)
        fields["plot"] = [tuple(pair) for pair in fields.get("plot", [])]
        return cls(**fields)


def uptime() -> str:
    """``uptime``'s line (the machine's load), or the load averages where it is missing."""
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def utc_now() -> str:
    """The date and time now, as the curves write it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _cell(value: Cell) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int) or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def verdict(curve: Curve) -> str:
    """``holds``, ``does not hold`` or nothing (no bound)."""
    if curve.holds is None:
        return ""
    return "holds" if curve.holds else "does not hold"


def section(curve: Curve, image: str | None) -> list[str]:
    """The Markdown section of one curve (``image``: the plot's path from the page)."""
    lines = [
        f"<!-- curve {curve.name} -->",
        f"### {curve.title}",
        "",
        f"Measured {curve.date} by",
        "",
        "```",
        curve.command,
        "```",
        "",
        f"Load at the start (`uptime`): `{curve.uptime}`.",
        "",
        "| " + " | ".join(curve.columns) + " |",
        "|" + "|".join("---:" for _ in curve.columns) + "|",
    ]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in curve.rows]
    lines.append("")
    if curve.bound:
        lines += [f"**Bound:** {curve.bound} **It {verdict(curve) or 'is not judged'}.**", ""]
    for note in curve.notes:
        lines += [note, ""]
    if image is not None:
        lines += [f"![{curve.title}]({image})", ""]
    lines.append(f"<!-- /curve {curve.name} -->")
    return lines


def plot(curve: Curve, path: Path) -> bool:
    """Write the curve's plot (PNG, matplotlib); False when there is nothing to plot."""
    xs = curve.column(curve.columns[0])
    if not curve.plot or len(xs) < 2:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, left = plt.subplots(figsize=(7, 3.8))
    axes: dict[str, Any] = {}
    colours = ["#4c72b0", "#c44e52", "#55a868", "#8172b2", "#ccb974", "#64b5cd"]
    handles = []
    for index, (column, label) in enumerate(curve.plot):
        if label not in axes:
            axes[label] = left if not axes else left.twinx()
            axes[label].set_ylabel(label)
        ys = curve.column(column)
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if isinstance(y, int | float)]
        style = "o-" if axes[label] is left else "s--"
        (line,) = axes[label].plot(
            [p[0] for p in points], [p[1] for p in points], style, color=colours[index % 6]
        )
        line.set_label(column)
        handles.append(line)
    for ax in axes.values():
        ax.set_ylim(bottom=0)
    if curve.log_x:
        left.set_xscale("log")
    left.set_xlabel(curve.columns[0] + (" (log scale)" if curve.log_x else ""))
    left.legend(handles=handles, fontsize=8, loc="best")
    left.set_title(curve.title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


CURVES_HEADING = "## Cost curves"
"""The heading under which :func:`write_curves` adds a curve the page does not have yet."""

CURVES_INTRO = """\
How costs grow with the work: logs written at once, idle readers, stored ledgers and
entries, a log's length, stored data. Each table comes from the one command above it
(`walog bench --curves` runs them all; `--only curve-NAME` one), each with its bound and
whether it holds. They were measured on a shared two-core development machine, under
`nice -n 15`, while other work ran: the load is written next to each table, and
throughputs and latencies are noisy (a second run can differ by tens of percent); counts
(metadata calls) and sizes (memory, index) are not.
"""


def write_curves(curves: Sequence[Curve], path: Path) -> None:
    """Put each curve's section and plot into the Markdown page ``path``: an older section
    of the same curve is replaced in place; a new one is added under :data:`CURVES_HEADING`
    (which is added at the end of the page when missing). Plots go to ``img/`` next to it."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    for curve in curves:
        image_name = f"{curve.name.replace(':', '-')}.png"
        made = plot(curve, path.parent / "img" / image_name)
        block = "\n".join(section(curve, f"img/{image_name}" if made else None))
        pattern = re.compile(
            rf"<!-- curve {re.escape(curve.name)} -->.*?<!-- /curve {re.escape(curve.name)} -->",
            re.DOTALL,
        )
        found = pattern.search(text)
        if found is not None:
            text = text[: found.start()] + block + text[found.end() :]
            continue
        if CURVES_HEADING not in text:
            text = text.rstrip("\n") + f"\n\n{CURVES_HEADING}\n\n{CURVES_INTRO}"
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def print_curves(curves: Sequence[Curve]) -> list[str]:
    """The curves as plain text lines (a table each, its bound and verdict)."""
    out: list[str] = []
    for curve in curves:
        out += [f"{curve.title}:", "  " + " | ".join(curve.columns)]
        out += ["  " + " | ".join(_cell(v) for v in row) for row in curve.rows]
        if curve.bound:
            out.append(f"  bound: {curve.bound} -> {verdict(curve)}")
    return out


__all__ = [
    "CURVES",
    "Curve",
    "print_curves",
    "section",
    "uptime",
    "utc_now",
    "verdict",
    "write_curves",
]

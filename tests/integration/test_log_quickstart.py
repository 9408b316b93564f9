"""The quickstart tour runs end to end and shows the fencing of the first writer."""

from __future__ import annotations

from walog.quickstart import run_quickstart


def test_quickstart_shows_takeover_fencing_and_truncation() -> None:
    lines: list[str] = []
    assert run_quickstart(say=lines.append) == 0
    text = "\n".join(lines)
    assert "WriterFencedError" in text
    assert "the reader followed the change of writer: order-8" in text
    assert "2 whole ledger(s) deleted" in text

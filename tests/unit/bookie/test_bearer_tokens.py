"""Token rotation rule: after a reload the new token is in force and the previous one is
accepted until its grace period ends; an unchanged or unreadable file changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.server.security import BearerTokens


def test_the_previous_token_is_accepted_only_within_its_grace(tmp_path: Path) -> None:
    now = [100.0]
    path = tmp_path / "token"
    path.write_text("first\n")
    tokens = BearerTokens(path, grace_s=30.0, clock=lambda: now[0])
    assert tokens.accepts(b"first") and not tokens.accepts(b"second")
    assert tokens.reload() is False  # unchanged
    path.write_text("second\n")
    assert tokens.reload() is True
    assert tokens.accepts(b"second") and tokens.accepts(b"first")
    now[0] += 29.9
    assert tokens.accepts(b"first")
    now[0] += 0.2
    assert not tokens.accepts(b"first") and tokens.accepts(b"second")
    assert not tokens.accepts(b"")


def test_an_empty_token_file_keeps_the_tokens_in_force(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    tokens = BearerTokens(path, grace_s=30.0)
    path.write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        tokens.reload()
    assert tokens.accepts(b"first")

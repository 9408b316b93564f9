"""ZooKeeper releases known to lose transactions they acknowledged are named, with the
releases to run instead; the others pass unnamed."""

from __future__ import annotations

import pytest

from walog.metadata.zookeeper_probe import known_loss


@pytest.mark.parametrize("version", ["3.4.14", "3.7.2", "3.8.0", "3.8.3", "3.9.0", "3.9.1"])
def test_a_release_that_loses_writes_when_a_majority_crashes_around_a_resync_is_named(
    version: str,
) -> None:
    why = known_loss(version)
    assert why is not None and f"ZooKeeper {version} " in why
    assert "ZOOKEEPER-4646" in why and "3.8.4" in why and "3.9.4" in why


def test_the_release_with_the_discontinuous_committed_log_is_named() -> None:
    why = known_loss("3.9.3")
    assert why is not None and "ZOOKEEPER-4925" in why


@pytest.mark.parametrize("version", ["3.8.4", "3.8.5", "3.9.2", "3.9.4", "3.10.0", "4.0.1"])
def test_a_release_with_no_known_loss_passes(version: str) -> None:
    assert known_loss(version) is None


@pytest.mark.parametrize("version", ["", "3.8", "3.x.1", "latest"])
def test_a_version_that_does_not_parse_is_not_judged(version: str) -> None:
    assert known_loss(version) is None

"""What ZooKeeper's ACLs on walog's records must refuse, checked with a kazoo client of the
principal in question (the tests of digest and of SASL authentication share them)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError


def assert_shut_out(stranger: KazooClient, chroot: str, paths: list[str]) -> None:
    """``stranger`` can neither read nor list nor change nor create anything; it is stopped."""
    try:
        for path in [*paths, chroot]:
            with pytest.raises(NoAuthError):
                stranger.get(path)
        with pytest.raises(NoAuthError):
            stranger.get_children(chroot)
        with pytest.raises(NoAuthError):
            stranger.set(paths[0], b"{}")
        with pytest.raises(NoAuthError):
            stranger.create(chroot + "/intruder", b"")
        with pytest.raises(NoAuthError):
            stranger.delete(paths[-1])
    finally:
        stranger.stop()


def assert_reads_only(reader: KazooClient, chroot: str, paths: list[str]) -> None:
    """``reader`` reads every one of ``paths`` but changes and creates nothing; stopped."""
    try:
        for path in paths:
            data, _ = reader.get(path)
            assert data
        with pytest.raises(NoAuthError):
            reader.set(paths[0], b"{}")
        with pytest.raises(NoAuthError):
            reader.delete(paths[-1])
        with pytest.raises(NoAuthError):
            reader.create(chroot + "/intruder", b"")
    finally:
        reader.stop()

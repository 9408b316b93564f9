"""Commands that look at a cluster never create its metadata store, and a ZooKeeper port
that refuses connections is reported at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_cli import _env
from walog import main as cli
from walog.testing import ZooKeeperServer, free_port

READ_ONLY = [
    ["logs"],
    ["ledgers"],
    ["bookies"],
    ["ledger", "show", "1"],
    ["log", "show", "audit"],
    ["tail", "audit", "--idle-timeout", "1"],
    ["truncate", "audit", "--before", "1:0:0"],
    ["status"],
]


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
def test_a_command_never_creates_a_missing_sqlite_store_and_names_its_path(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mistyped.db"
    status = cli.main([*command, "--metadata", f"sqlite:///{path}"])
    out, err = capsys.readouterr()
    assert status == 1
    # The line is shortened in the middle when long: the file's name and the end remain.
    assert "sqlite metadata store /" in out + err
    assert "mistyped.db does not exist (check the path of the metadata URI" in out + err
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["logs"], ["status"]], ids=" ".join)
def test_a_command_never_creates_a_missing_zookeeper_chroot_and_names_it(
    command: list[str], zookeeper: ZooKeeperServer, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = zookeeper.uri("/walog-mistyped-chroot")
    status = cli.main([*command, "--metadata", uri])
    out, err = capsys.readouterr()
    assert status == 1
    assert "has no /walog-mistyped-chroot" in out + err
    # Asked again with a store that may create it: it was not there.
    status = cli.main(["logs", "--metadata", uri])
    assert status == 1
    assert "has no /walog-mistyped-chroot" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["ledgers"], ["status"]], ids=" ".join)
def test_a_zookeeper_port_that_refuses_connections_fails_at_once_saying_so(
    command: list[str],
) -> None:
    # --timeout 600: reporting it only when the connection timeout ran out would outlast
    # the 60 s this test waits.
    done = subprocess.run(
        [sys.executable, "-m", "walog", *command, "--timeout", "600"],
        env=_env(WALOG_METADATA=f"zk://127.0.0.1:{free_port()}/walog"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "refuses connections: nothing listens there (is ZooKeeper running?" in (
        done.stdout + done.stderr
    )

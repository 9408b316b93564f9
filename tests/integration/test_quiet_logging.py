"""A library must not print: an application that sets up no logging sees no walog output.

The program below appends, reads, and has a second writer take the log over (which fences
the first writer and makes the library log warnings); run as its own process with nothing
configured, it must leave stdout and stderr empty. Configured, the same events reach the
application's handlers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    import logging, sys
    import walog
    from walog.errors import WriterFencedError
    from walog.testing import LocalCluster

    if sys.argv[2] == "configured":
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    with LocalCluster(3, "sqlite", data_dir=sys.argv[1]) as cluster:
        with walog.connect(cluster.metadata_uri) as client:
            log = client.open_log("quiet")
            first = log.open_writer()
            position = first.append(b"one")
            with log.open_reader(position) as reader:
                assert reader.read_next(timeout=5).data == b"one"
            with log.open_writer() as second:  # takes over: the first is fenced
                second.append(b"two")
            try:
                first.append(b"three")
            except WriterFencedError:
                pass
            else:
                raise AssertionError("the fenced writer appended")
            first.close()
    """
)


def run_program(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("WALOG_LOG_LEVEL", None)
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path / mode), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )


def test_an_application_that_configures_no_logging_sees_no_walog_output(tmp_path: Path) -> None:
    done = run_program(tmp_path, "silent")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""


def test_an_application_that_configures_logging_gets_walogs_events(tmp_path: Path) -> None:
    done = run_program(tmp_path, "configured")
    assert done.returncode == 0, done.stderr
    assert "walog.log.writer" in done.stderr and "another writer took over" in done.stderr


# A client whose ZooKeeper goes away: kazoo logs the lost connection and every reconnect
# attempt while the call waits out its timeout.
ZOOKEEPER_LOST = textwrap.dedent(
    """
    import logging, sys
    import walog
    from walog.errors import MetadataError
    from walog.testing import ZooKeeperServer

    if sys.argv[1] == "configured":
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    with ZooKeeperServer() as zk:
        client = walog.connect(zk.uri("/quiet"), timeout=2)
        assert client.list_logs() == []
        zk.stop()
        try:
            client.list_logs()
        except MetadataError:
            pass
        else:
            raise AssertionError("a call reached a stopped ZooKeeper")
        client.close()
    """
)


def run_zookeeper_program(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("WALOG_LOG_LEVEL", None)
    return subprocess.run(
        [sys.executable, "-c", ZOOKEEPER_LOST, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )


def test_kazoos_lines_never_reach_an_unconfigured_applications_stderr(tmp_path: Path) -> None:
    done = run_zookeeper_program(tmp_path, "silent")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""


def test_kazoos_lines_reach_a_configured_application_under_walogs_logger(
    tmp_path: Path,
) -> None:
    done = run_zookeeper_program(tmp_path, "configured")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if ":kazoo" in line or "kazoo." in line]
    assert lines, done.stderr
    assert all(":walog.metadata.zookeeper.kazoo." in line for line in lines), done.stderr

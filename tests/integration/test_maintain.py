"""``walog maintain`` keeps every log to its stored settings, with no writer running: once
(``--once``, for cron) and as a service; ``walog log create`` and ``log config`` store the
settings, ``walog log show`` and ``walog status`` show them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import walog
from tests.processes import DIE_WITH_PARENT, repo_env
from walog import main as cli
from walog.testing import LocalCluster


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``walog ARGV`` in this process: (status, stdout, stderr)."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def _closed_ledgers(client: walog.Client, name: str, count: int) -> list[int]:
    """Write ``count`` ledgers through as many writers, each closed (no roll: the writers'
    own retention never runs); return their ids."""
    log = client.open_log(name)
    for i in range(count):
        with log.open_writer() as writer:
            writer.append(b"record %d" % i)
    return [s.ledger_id for s in log.segments()]


def test_a_log_created_with_retention_by_the_cli_loses_old_ledgers_with_maintain_once(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    status, out, err = _run(["log", "create", log_name, "--retention-max-age", "0.000001"], capsys)
    assert status == 0, err
    assert ["retention.max_age", "1e-06"] in [line.split() for line in out.splitlines()]
    status, _, err = _run(["log", "create", log_name], capsys)
    assert status == 1 and "exists" in err and err.count("\n") == 1

    for record in ("a", "b", "c"):  # each call a writer of its own: three closed ledgers
        status, _, err = _run(["append", log_name, record], capsys)
        assert status == 0, err
    status, out, err = _run(["log", "show", log_name, "--json"], capsys)
    assert status == 0, err
    shown = json.loads(out)
    assert shown["config"]["retention.max_age"] == 1e-06
    ledgers = [s["ledger_id"] for s in shown["segments"]]
    assert len(ledgers) == 3

    status, out, err = _run(["maintain", "--once"], capsys)
    assert status == 0, out + err
    line = next(x for x in out.splitlines() if x.startswith(f"log {log_name!r}:"))
    assert "deleted 2 ledger(s)" in line
    assert "retention waits for: ledger" in line and "being written" in line
    status, out, err = _run(["log", "show", log_name, "--json"], capsys)
    assert [s["ledger_id"] for s in json.loads(out)["segments"]] == ledgers[-1:]
    with walog.connect(cluster.metadata_uri) as client:
        for ledger_id in ledgers[:-1]:
            with pytest.raises(walog.NoSuchLedgerError):
                client.ledger_metadata(ledger_id)

    status, out, err = _run(["status", "--json"], capsys)
    health = {h["name"]: h for h in json.loads(out)["log_health"]}[log_name]
    assert health["ledgers"] == 1 and health["retention_reason"] == "writing"
    assert health["archive_lag_ledgers"] == 1 and health["oldest_record_age_s"] >= 0


def test_a_bad_setting_is_one_line_naming_it_and_stores_nothing(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    assert _run(["log", "create", log_name, "--set", "roll.max_entries=100"], capsys)[0] == 0
    for bad, named in (
        (["--set", "retention.max_agee=5"], "'retention.max_agee'"),
        (["--set", "retention.max_age=soon"], "retention.max_age"),
        (["--set", "ack_quorum=5"], "ack_quorum"),
        (["--set", "novalue"], "'novalue'"),
    ):
        status, out, err = _run(["log", "config", log_name, *bad], capsys)
        assert status == 2 and out == "", err
        assert err.startswith("walog: error: ") and named in err and err.count("\n") == 1
    status, _, err = _run(
        ["log", "create", f"{log_name}-x", "--retention-max-bytes", "lots"], capsys
    )
    assert status == 2 and "retention.max_bytes" in err
    status, out, err = _run(["logs"], capsys)
    assert f"{log_name}-x" not in out.split()
    status, out, err = _run(
        ["log", "config", log_name, "--set", "retention.max_bytes=4096"], capsys
    )
    assert status == 0, err
    status, out, err = _run(["log", "config", log_name, "--json"], capsys)
    config = json.loads(out)["config"]
    assert config["roll.max_entries"] == 100 and config["retention.max_bytes"] == 4096


def test_a_log_created_with_retention_in_python_loses_old_ledgers_with_maintain_once(
    cluster: LocalCluster, log_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with walog.connect(cluster.metadata_uri) as client:
        retention = walog.RetentionPolicy(max_age=1e-6)
        client.create_log(log_name, walog.LogConfig(retention=retention))
        ledgers = _closed_ledgers(client, log_name, 3)
        assert len(ledgers) == 3
        status, out, err = _run(["maintain", "--once", "--metadata", cluster.metadata_uri], capsys)
        assert status == 0, out + err
        assert [s.ledger_id for s in client.open_log(log_name).segments()] == ledgers[-1:]


def test_the_maintenance_service_applies_retention_to_a_log_with_no_writer(
    cluster: LocalCluster, log_name: str
) -> None:
    env = repo_env()
    env["WALOG_METADATA"] = cluster.metadata_uri
    with walog.connect(cluster.metadata_uri) as client:
        client.create_log(log_name)  # keeps everything until its settings change
        ledgers = _closed_ledgers(client, log_name, 3)
        service = subprocess.Popen(
            [*DIE_WITH_PARENT, sys.executable, "-m", "walog", "maintain", "--interval-s", "0.2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert service.stdout is not None
            seen = []
            for line in service.stdout:  # a pass's report: nothing deleted yet
                seen.append(line)
                if line.startswith(f"log {log_name!r}:"):
                    assert "deleted 0 ledger(s)" in line and "no retention limit" in line
                    break
            client.open_log(log_name).configure({"retention.max_age": 1e-6})
            for line in service.stdout:  # the running service reads the new settings
                seen.append(line)
                if line.startswith(f"log {log_name!r}:") and "deleted 2 ledger(s)" in line:
                    break
            else:
                pytest.fail("the service ended without deleting: " + "".join(seen))
            assert [s.ledger_id for s in client.open_log(log_name).segments()] == ledgers[-1:]
            service.send_signal(signal.SIGTERM)
            assert service.wait(timeout=30) == 0, service.stderr.read() if service.stderr else ""
        finally:
            if service.poll() is None:
                service.kill()
                service.wait()


def test_maintain_says_so_when_an_archive_is_due_but_pyspark_is_missing(
    cluster: LocalCluster,
    log_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    archive = walog.ArchivePolicy(to=str(tmp_path / "archive"))
    with walog.connect(cluster.metadata_uri) as client:
        client.create_log(log_name, walog.LogConfig(archive=archive))
        _closed_ledgers(client, log_name, 2)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if not installed
    status, out, err = _run(["maintain", "--once", "--metadata", cluster.metadata_uri], capsys)
    assert status == 0, out + err
    line = next(x for x in out.splitlines() if x.startswith(f"log {log_name!r}:"))
    assert "archive: skipped (2 ledger(s) to archive to " in line
    assert "pyspark is not installed" in line


@pytest.mark.parametrize(
    "service",
    [["maintain", "--interval-s", "0.2"], ["autorecovery", "--interval", "0.2", "--json"]],
    ids=["maintain", "autorecovery"],
)
def test_a_service_started_before_its_metadata_store_waits_for_it_instead_of_exiting(
    service: list[str],
) -> None:
    from walog.testing import ZooKeeperServer

    zookeeper = ZooKeeperServer()  # its port is chosen; nothing listens there yet
    env = repo_env()
    env["WALOG_METADATA"] = zookeeper.uri()
    proc = subprocess.Popen(
        [*DIE_WITH_PARENT, sys.executable, "-m", "walog", *service, "--timeout", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        waiting = proc.stderr.readline()
        assert f"walog {service[0]}: " in waiting and "trying again in 5 s" in waiting, waiting
        assert proc.poll() is None
        with zookeeper.start():
            first = proc.stdout.readline()  # a pass's report: connected and working
            assert first.strip(), proc.stderr.read() if proc.poll() is not None else first
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_service_stopped_while_it_waits_for_its_metadata_store_exits_cleanly() -> None:
    from walog.testing import free_port

    env = repo_env()
    env["WALOG_METADATA"] = f"zk://127.0.0.1:{free_port()}/walog"
    proc = subprocess.Popen(
        [*DIE_WITH_PARENT, sys.executable, "-m", "walog", "maintain", "--timeout", "1"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert "trying again" in proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

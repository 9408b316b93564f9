"""The ``walog`` command: every subcommand answers --help, errors are one line, and the
ledger and log subcommands work against a real cluster."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import walog
from tests.processes import DIE_WITH_PARENT, repo_env
from walog import main as cli
from walog.cli import ledgers
from walog.testing import LocalCluster

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = REPO / "docs" / "operations.md"
SUBCOMMANDS = [
    ["quickstart"],
    ["bookie"],
    ["bookie", "decommission"],
    ["local"],
    ["bookies"],
    ["append"],
    ["tail"],
    ["ledgers"],
    ["ledger", "show"],
    ["logs"],
    ["status"],
    ["log", "show"],
    ["log", "create"],
    ["log", "config"],
    ["log", "cursors"],
    ["log", "repair"],
    ["truncate"],
    ["recover"],
    ["archive"],
    ["autorecovery"],
    ["maintain"],
    ["bench"],
]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``walog ARGV`` in this process: (status, stdout, stderr)."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # --help and --version exit through argparse
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def _env(**extra: str) -> dict[str, str]:
    env = repo_env()
    env.pop("WALOG_METADATA", None)
    env.update(extra)
    return env


def _documented_subcommands() -> list[str]:
    """The subcommands of the command table in docs/operations.md ("The `walog` command"):
    the lower-case words after ``walog`` in each row's first cell."""
    section = OPERATIONS.read_text().split("## The `walog` command", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `walog ([^`]+)`", section, re.M)
    return [" ".join(re.match(r"[a-z]+(?: [a-z]+)*", row)[0].split()[:2]) for row in rows]


def test_subcommand_list_matches_the_operations_guide() -> None:
    assert sorted(_documented_subcommands()) == sorted(" ".join(words) for words in SUBCOMMANDS)


def test_parser_has_exactly_the_documented_subcommands() -> None:
    actions = [a for a in cli.build_parser()._actions if a.choices and a.dest == "command"]
    assert sorted(actions[0].choices) == sorted({words[0] for words in SUBCOMMANDS})


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_answers_help_and_takes_metadata_if_it_reaches_a_cluster(
    words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _run([*words, "--help"], capsys)
    assert status == 0, err
    assert "usage:" in out
    if words != ["quickstart"]:  # it runs a cluster of its own
        assert "--metadata" in out, f"every subcommand takes --metadata ({words})"


def test_python_dash_m_walog_is_the_same_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "walog", "--help"], env=_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for words in SUBCOMMANDS:
        assert words[0] in done.stdout


def test_bad_metadata_uri_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(["ledgers", "--metadata", "mysql://db/x"], capsys)
    assert status != 0
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("walog: error: ")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--verify-percent", "5"], "--verify-percent needs --verify-entries"),
        (["--verify-entries", "--verify-percent", "101"], "must be between 0 and 100, got 101"),
        (["--verify-entries", "--verify-percent", "all"], "not a number: 'all'"),
    ],
)
def test_autorecovery_refuses_a_verify_percent_it_cannot_use(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _run(["autorecovery", "--metadata", "sqlite:///x.db", *extra], capsys)
    assert status == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_bad_metadata_uri_from_the_environment_in_a_subprocess() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "walog", "logs"],
        env=_env(WALOG_METADATA="zk://"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.startswith("walog: error: ")
    assert done.stderr.count("\n") == 1, done.stderr


def test_unreachable_zookeeper_is_one_error_line() -> None:
    from walog.testing import free_port

    done = subprocess.run(
        [sys.executable, "-m", "walog", "ledgers", "--timeout", "2"],
        env=_env(WALOG_METADATA=f"zk://127.0.0.1:{free_port()}/walog"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("walog: error: MetadataError: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_missing_metadata_names_the_flag_and_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WALOG_METADATA", raising=False)
    status, _, err = _run(["ledgers"], capsys)
    assert status == 2
    assert "--metadata" in err and "WALOG_METADATA" in err


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(["ledger", "show", "not-a-number", "--metadata", "sqlite:///x"], capsys)
    assert status == 2
    assert err.startswith("walog: error: ") and err.count("\n") == 1
    status, _, err = _run(["no-such-command"], capsys)
    assert status == 2
    assert err.startswith("walog: error: ") and err.count("\n") == 1


def test_unexpected_exception_is_one_line_unless_traceback_is_asked_for(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(args: object) -> int:
        raise RuntimeError("kaput\nsecond line")

    monkeypatch.setattr(ledgers, "list_ledgers", broken)
    monkeypatch.delenv("WALOG_TRACEBACK", raising=False)
    status, _, err = _run(["ledgers", "--metadata", "sqlite:///x.db"], capsys)
    assert status == 1
    assert err.startswith("walog: error: unexpected RuntimeError: kaput (set WALOG_TRACEBACK=1")
    assert err.count("\n") == 1
    monkeypatch.setenv("WALOG_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="kaput"):
        cli.main(["ledgers", "--metadata", "sqlite:///x.db"])


def test_feature_missing_from_the_build_is_reported_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_built() -> cli.Main:
        raise ModuleNotFoundError("No module named 'walog.bench'", name="walog.bench")

    bench = cli.DELEGATED["bench"]._replace(load=not_built)
    monkeypatch.setitem(cli.DELEGATED, "bench", bench)
    status, _, err = _run(["bench", "--quick"], capsys)
    assert status == 2
    assert err == "walog: error: benchmarking is not available in this build\n"
    status, out, _ = _run(["bench", "--help"], capsys)
    assert status == 0 and "usage:" in out


def test_bookie_subcommand_hands_its_arguments_to_the_bookie(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = _run(["bookie", "--help"], capsys)
    assert status == 0
    assert "--data-dir" in out and "--allow-format" in out


def test_ledger_commands_against_a_cluster(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    with walog.connect(cluster.metadata_uri) as client:
        closed = client.create_ledger()
        closed.append(b"a")
        closed.close()
        open_ledger = client.create_ledger()
        open_ledger.append(b"b")
        open_ledger.append(b"c")

        status, out, err = _run(["ledgers"], capsys)
        assert status == 0, err
        assert {closed.ledger_id, open_ledger.ledger_id} <= {int(x) for x in out.split()}

        status, out, err = _run(["ledgers", "--json"], capsys)
        assert status == 0, err
        assert {closed.ledger_id, open_ledger.ledger_id} <= set(json.loads(out)["ledgers"])

        status, out, err = _run(["ledger", "show", str(closed.ledger_id), "--json"], capsys)
        assert status == 0, err
        shown = json.loads(out)
        assert shown["state"] == "CLOSED" and shown["last_entry_id"] == 0
        assert len(shown["ensembles"][0][1]) == 3

        status, out, err = _run(["ledger", "show", str(closed.ledger_id)], capsys)
        assert status == 0, err
        lines = out.splitlines()
        assert lines[0].startswith(f"ledger {closed.ledger_id}: CLOSED, last entry 0, E=3")
        assert lines[1].split() == ["FIRST", "ENTRY", "ENSEMBLE"]
        assert lines[2].split()[0] == "0" and len(lines[2].split(", ")) == 3

        status, out, err = _run(["recover", str(open_ledger.ledger_id)], capsys)
        assert status == 0, err
        assert out.strip() == f"ledger {open_ledger.ledger_id}: CLOSED, last entry 1"
        assert client.ledger_metadata(open_ledger.ledger_id).state == "CLOSED"

    status, _, err = _run(["ledger", "show", "999999999"], capsys)
    assert status == 1
    assert err.startswith("walog: error: NoSuchLedgerError") and err.count("\n") == 1


def test_log_commands_against_a_cluster(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("walog.log.sync", reason="the log layer is not in this build")
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    status, out, err = _run(["append", log_name, "one", "two"], capsys)
    assert status == 0, err
    positions = [walog.Position.parse(line) for line in out.split()]
    assert len(positions) == 2 and positions[0] < positions[1]

    monkeypatch.setattr(sys, "stdin", _Stdin(b"three\nfour\n"))
    status, out, err = _run(["append", log_name], capsys)
    assert status == 0, err
    assert len(out.split()) == 2

    status, out, err = _run(["logs"], capsys)
    assert status == 0 and log_name in out.split(), err

    status, out, err = _run(["tail", log_name, "--idle-timeout", "2", "-n", "4"], capsys)
    assert status == 0, err
    assert [line.split("\t")[1] for line in out.splitlines()] == ["one", "two", "three", "four"]
    status, out, err = _run(["tail", log_name, "--from", str(positions[1]), "--max", "1"], capsys)
    assert status == 0, err
    assert out == f"{positions[1]}\ttwo\n"
    status, out, err = _run(["tail", log_name, "--json", "--max", "1"], capsys)
    assert status == 0, err
    assert json.loads(out)["data"] == "one"

    status, out, err = _run(["logs", "--json"], capsys)
    assert status == 0 and log_name in json.loads(out)["logs"], err

    status, out, err = _run(["log", "show", log_name, "--json"], capsys)
    assert status == 0, err
    segments = json.loads(out)["segments"]
    assert segments and all("ledger_id" in s for s in segments)

    status, out, err = _run(["log", "show", log_name], capsys)
    assert status == 0, err
    table, marks = out.split("\n\n", 1)
    writer, header, *rows = table.splitlines()
    assert writer == "writer: none"  # each `walog append` closed its writer
    assert header.split() == ["LEDGER", "STATE", "FIRST", "POSITION", "LAST", "ENTRY"]
    assert f"starts at        {segments[0]['first_position']}" in marks
    assert [int(row.split()[0]) for row in rows] == [s["ledger_id"] for s in segments]

    status, out, err = _run(["truncate", log_name, "--before", str(positions[0])], capsys)
    assert status == 0, err
    assert out.startswith("deleted 0 ledger(s) of log")

    status, _, err = _run(["log", "show", f"{log_name}-absent"], capsys)
    assert status == 1 and "NoSuchLogError" in err


class _Stdin:
    """Stands in for sys.stdin: the CLI reads bytes from ``sys.stdin.buffer``."""

    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)


def test_local_runs_a_cluster_until_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            *DIE_WITH_PARENT,
            sys.executable,
            "-m",
            "walog",
            "local",
            "--bookies",
            "2",
            "--data-dir",
            str(tmp_path),
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        uri = proc.stdout.readline().strip()
        assert uri == f"sqlite:///{tmp_path / 'meta.db'}", proc.stderr and proc.stderr.read()
        with walog.connect(uri) as client:
            assert len(client.bookies()) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (tmp_path / "logs" / "bookie-1.log").exists()


def test_quickstart_runs_to_completion(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(["quickstart"], capsys)
    assert status == 0, err
    assert out.strip()


def test_a_password_log_is_usable_with_a_password_file(
    cluster: LocalCluster,
    log_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    secret = tmp_path / "log.password"
    secret.write_text("s3cret\n")
    status, out, err = _run(["append", log_name, "one", "--password-file", str(secret)], capsys)
    assert status == 0, err
    status, out, err = _run(["tail", log_name, "-n", "1", "--password-file", str(secret)], capsys)
    assert status == 0 and out.split("\t")[1] == "one\n", err
    status, _, err = _run(["tail", log_name, "-n", "1", "--password", "wrong"], capsys)
    assert status == 1 and err.startswith("walog: error: UnauthorizedError"), err
    assert "s3cret" not in err


def test_a_closed_pipe_ends_tail_with_status_0(cluster: LocalCluster, log_name: str) -> None:
    with (
        walog.connect(cluster.metadata_uri) as client,
        client.open_log(log_name).open_writer() as writer,
    ):
        for i in range(2000):
            writer.append_async(b"record %d" % i)
    tail = subprocess.Popen(
        [*DIE_WITH_PARENT, sys.executable, "-m", "walog", "tail", log_name, "--idle-timeout", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(WALOG_METADATA=cluster.metadata_uri),
    )
    assert tail.stdout is not None and tail.stderr is not None
    assert tail.stdout.readline().endswith(b"record 0\n")
    tail.stdout.close()  # what `walog tail LOG | head -1` does once it has its line
    assert tail.wait(timeout=60) == 0
    assert tail.stderr.read() == b""

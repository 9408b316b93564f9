"""``walog tail`` as Unix tail, ``walog truncate`` that looks before it deletes, JSON output,
and the words the commands share, against a real cluster."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

import walog
from tests.integration.test_cli import _env, _run
from tests.processes import DIE_WITH_PARENT
from walog.testing import LocalCluster


def _fill(cluster: LocalCluster, name: str, batches: list[list[bytes]]) -> list[walog.Position]:
    """Each batch in a ledger of its own (a writer per batch, closed after it)."""
    positions = []
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(name)
        for batch in batches:
            with log.open_writer() as writer:
                positions += [writer.append(record) for record in batch]
    return positions


def test_tail_n_prints_the_last_n_records_and_exits(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    _fill(cluster, log_name, [[b"a", b"b", b"c"], [b"d", b"e"]])
    # No --idle-timeout: the command ends by itself once the last records are printed.
    status, out, err = _run(["tail", log_name, "-n", "3"], capsys)
    assert status == 0, err
    assert [line.split("\t")[1] for line in out.splitlines()] == ["c", "d", "e"]
    status, out, err = _run(["tail", log_name, "-n", "50"], capsys)
    assert status == 0, err
    assert [line.split("\t")[1] for line in out.splitlines()] == ["a", "b", "c", "d", "e"]


def test_tail_f_follows_the_log_after_its_last_records(
    cluster: LocalCluster, log_name: str
) -> None:
    _fill(cluster, log_name, [[b"old", b"last"]])
    tail = subprocess.Popen(
        [*DIE_WITH_PARENT, sys.executable, "-m", "walog", "tail", log_name, "-n", "1", "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(WALOG_METADATA=cluster.metadata_uri),
        text=True,
    )
    try:
        assert tail.stdout is not None
        assert tail.stdout.readline().endswith("\tlast\n")
        _fill(cluster, log_name, [[b"new"]])
        assert tail.stdout.readline().endswith("\tnew\n")
        assert tail.poll() is None  # still following
    finally:
        tail.kill()
        tail.wait()


def test_tail_json_has_the_same_keys_for_text_and_binary_records(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    _fill(cluster, log_name, [["héllo".encode(), b"\xff\x00\xfe"]])
    status, out, err = _run(["tail", log_name, "-n", "2", "--json"], capsys)
    assert status == 0, err
    text, binary = (json.loads(line) for line in out.splitlines())
    assert text.keys() == binary.keys() == {"position", "timestamp", "data", "data_base64"}
    assert text["data"] == "héllo" and base64.b64decode(text["data_base64"]) == "héllo".encode()
    assert binary["data"] is None and base64.b64decode(binary["data_base64"]) == b"\xff\x00\xfe"


def test_truncate_dry_run_prints_what_it_would_delete_and_deletes_nothing(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    positions = _fill(cluster, log_name, [[b"a"], [b"b"], [b"c"]])
    with walog.connect(cluster.metadata_uri) as client:
        before = [s.ledger_id for s in client.open_log(log_name).segments()]
    argv = ["truncate", log_name, "--before", str(positions[2]), "--dry-run"]
    status, out, err = _run(argv, capsys)
    assert status == 0, err
    assert out == (
        f"would delete 2 ledger(s) ({before[0]}, {before[1]}) of log {log_name!r} "
        f"before {positions[2]}\n"
    )
    status, out, err = _run([*argv, "--json"], capsys)
    assert status == 0, err
    assert json.loads(out)["ledgers"] == before[:2] and json.loads(out)["dry_run"] is True
    with walog.connect(cluster.metadata_uri) as client:
        assert [s.ledger_id for s in client.open_log(log_name).segments()] == before
    status, out, err = _run([*argv[:-1], "--json"], capsys)
    assert status == 0, err
    assert json.loads(out)["ledgers"] == before[:2] and json.loads(out)["dry_run"] is False


def test_a_truncation_point_past_the_end_of_the_log_is_refused(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    positions = _fill(cluster, log_name, [[b"a"], [b"b"]])
    with walog.connect(cluster.metadata_uri) as client:
        before = [s.ledger_id for s in client.open_log(log_name).segments()]
    past = walog.Position(positions[-1].ledger_id + 1000, 0, 0)
    status, out, err = _run(["truncate", log_name, "--before", str(past)], capsys)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "past the end of log" in err, err
    last = positions[-1]
    assert f"the log now ends at entry {last.ledger_id}:{last.entry_id}, so " in err, err
    assert f"{last.ledger_id}:{last.entry_id + 1}:0 is the furthest truncation point" in err, err
    status, out, err = _run(["truncate", log_name, "--before", str(past), "--dry-run"], capsys)
    assert status == 2 and out == "" and "past the end of log" in err, err
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(log_name)
        assert [s.ledger_id for s in log.segments()] == before
        with log.open_reader("earliest") as reader:
            assert [reader.read_next(timeout=10).data for _ in range(2)] == [b"a", b"b"]  # type: ignore[union-attr]


def test_append_takes_take_over_between_the_log_and_its_records(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    status, out, err = _run(["append", log_name, "--take-over", "one", "--json", "two"], capsys)
    assert status == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["log"] for d in docs] == [log_name, log_name]
    positions = [walog.Position.parse(d["position"]) for d in docs]
    assert positions[0] < positions[1]


def test_bookies_and_status_use_the_same_words_for_a_bookies_state(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    status, out, err = _run(["bookies", "--json"], capsys)
    assert status == 0, err
    listed = {b["bookie_id"]: b["state"] for b in json.loads(out)["bookies"]}
    _, out, err = _run(["status", "--json"], capsys)
    shown = {b["bookie_id"]: b["state"] for b in json.loads(out)["bookies"]}
    assert listed == shown and set(listed.values()) == {"writable"}, (listed, shown)
    status, out, err = _run(["bookies"], capsys)
    assert {line.split()[1] for line in out.splitlines()} == {"writable"}


def test_recover_prints_json_when_asked(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    with walog.connect(cluster.metadata_uri) as client:
        ledger = client.create_ledger()
        ledger.append(b"x")
        status, out, err = _run(["recover", str(ledger.ledger_id), "--json"], capsys)
    assert status == 0, err
    assert json.loads(out) == {
        "ledger_id": ledger.ledger_id,
        "state": "CLOSED",
        "last_entry_id": 0,
        "log": None,
    }

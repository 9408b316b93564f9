"""The log commands that show and respect a log's writer and subscriptions, against a real
cluster: ``walog append`` refuses to fence a live writer without ``--take-over`` and puts
one call's records in one ledger; ``log show`` and ``status`` show the writer; after
``walog recover`` every view shows the ledger CLOSED; ``log cursors`` lists, commits and
deletes subscriptions."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

import walog
from walog import main as cli
from walog.errors import WriterFencedError
from walog.testing import LocalCluster


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``walog ARGV`` in this process: (status, stdout, stderr)."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


class _Stdin:
    """Stands in for sys.stdin: the CLI reads bytes from ``sys.stdin.buffer``."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


@pytest.fixture
def metadata(any_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("WALOG_METADATA", any_cluster.metadata_uri)
    return any_cluster.metadata_uri


def test_append_refuses_to_fence_a_live_writer_without_take_over(
    metadata: str, log_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with walog.connect(metadata) as client:
        writer = client.open_log(log_name).open_writer()
        first = writer.append(b"service")
        status, out, err = _run(["append", log_name, "intruder"], capsys)
        assert status == 2 and out == ""
        assert err.count("\n") == 1 and "live writer" in err and "--take-over" in err
        assert f"pid {os.getpid()}" in err
        assert writer.append(b"still the writer") > first  # not fenced

        status, out, err = _run(["append", "--take-over", log_name, "new owner"], capsys)
        assert status == 0, err
        with pytest.raises(WriterFencedError):
            writer.append(b"fenced now")
        writer.close()


def test_append_puts_every_record_of_one_call_in_one_ledger(
    metadata: str,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    status, out, err = _run(["append", log_name, "a", "b", "c"], capsys)
    assert status == 0, err
    from_args = [walog.Position.parse(line) for line in out.split()]
    monkeypatch.setattr(sys, "stdin", _Stdin(b"".join(b"line %d\n" % i for i in range(3000))))
    status, out, err = _run(["append", log_name], capsys)
    assert status == 0, err
    from_stdin = [walog.Position.parse(line) for line in out.split()]
    assert len(from_args) == 3 and len(from_stdin) == 3000
    assert len({p.ledger_id for p in from_args}) == 1
    assert len({p.ledger_id for p in from_stdin}) == 1
    with walog.connect(metadata) as client:
        segments = client.open_log(log_name).segments()
    assert [s.ledger_id for s in segments] == [from_args[0].ledger_id, from_stdin[0].ledger_id]
    assert [s.state for s in segments] == ["CLOSED", "CLOSED"]


def test_log_show_and_status_show_the_live_writer(
    metadata: str, log_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with walog.connect(metadata) as client, client.open_log(log_name).open_writer() as writer:
        writer.append(b"x")
        status, out, err = _run(["log", "show", log_name, "--json"], capsys)
        assert status == 0, err
        shown = json.loads(out)["writer"]
        assert shown["pid"] == os.getpid() and shown["epoch"] == writer.async_writer.epoch
        status, out, err = _run(["log", "show", log_name], capsys)
        assert status == 0, err
        assert out.startswith(f"writer: pid {os.getpid()} on ")
        status, out, err = _run(["status", "--json"], capsys)
        logs = {entry["name"]: entry for entry in json.loads(out)["logs"]}
        assert logs[log_name]["writer"]["pid"] == os.getpid()
    status, out, err = _run(["log", "show", log_name], capsys)
    assert status == 0, err
    assert out.startswith("writer: none\n")


def test_after_recover_every_view_shows_the_ledger_closed(
    metadata: str, log_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with walog.connect(metadata) as client:
        writer = client.open_log(log_name).open_writer()
        writer.append(b"one")
        writer.append(b"two")
        ledger_id = writer.async_writer.ledger_id
        status, out, err = _run(["recover", str(ledger_id)], capsys)
        assert status == 0, err
        assert out.startswith(f"ledger {ledger_id}: CLOSED, last entry ")

        status, out, err = _run(["log", "show", log_name, "--json"], capsys)
        assert status == 0, err
        doc = json.loads(out)
        assert [(s["ledger_id"], s["state"]) for s in doc["segments"]] == [(ledger_id, "CLOSED")]
        assert doc["segments"][0]["last_entry_id"] >= 0 and doc["writer"] is None
        status, out, err = _run(["status", "--json"], capsys)
        logs = {entry["name"]: entry for entry in json.loads(out)["logs"]}
        assert logs[log_name]["open_segment"] is None and logs[log_name]["writer"] is None
        status, out, err = _run(["status"], capsys)
        row = next(line.split() for line in out.splitlines() if line.startswith(log_name + " "))
        assert row[:3] == [log_name, "1", "-"]  # not WRITING TO the recovered ledger
        with pytest.raises(WriterFencedError):
            writer.append(b"three")
        writer.close()


def test_log_cursors_lists_commits_and_deletes_subscriptions(
    metadata: str, log_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _run(["append", log_name, "a", "b", "c"], capsys)
    assert status == 0, err
    positions = out.split()
    status, out, err = _run(["log", "cursors", log_name, "--commit", "etl", positions[1]], capsys)
    assert status == 0, err
    assert out == f"subscription 'etl' of log {log_name!r} now reads from {positions[1]}\n"

    status, out, err = _run(["log", "cursors", log_name, "--json"], capsys)
    assert status == 0, err
    (sub,) = json.loads(out)["subscriptions"]
    assert sub["name"] == "etl" and sub["position"] == positions[1]
    assert sub["entries_behind"] == 1  # the three records share one entry
    status, out, err = _run(["log", "cursors", log_name], capsys)
    assert status == 0, err
    header, row = out.splitlines()
    assert header.split()[:2] == ["SUBSCRIPTION", "POSITION"]
    assert row.split()[:2] == ["etl", positions[1]]
    with walog.connect(metadata) as client:
        reader = client.open_log(log_name).open_reader(subscription="etl")
        record = reader.read_next(timeout=30)
        reader.close()
    assert record is not None and record.data == b"b"

    for bad in (["--commit", "etl", "garbage"], ["--commit", "", positions[0]]):
        status, out, err = _run(["log", "cursors", log_name, *bad], capsys)
        assert status == 2 and err.count("\n") == 1, err
    status, out, err = _run(["log", "cursors", log_name, "--delete", "etl"], capsys)
    assert status == 0 and out == f"subscription 'etl' of log {log_name!r} deleted\n", err
    status, out, err = _run(["log", "cursors", log_name, "--delete", "etl"], capsys)
    assert status == 1 and "no subscription 'etl'" in err
    status, out, err = _run(["log", "cursors", log_name, "--json"], capsys)
    assert json.loads(out)["subscriptions"] == []

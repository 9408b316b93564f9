"""``walog tail --since``: from the first record stamped at or after an age or a time."""

from __future__ import annotations

import datetime
import time

import pytest

import walog
from tests.integration.test_cli import _run
from walog.cli.tail import parse_since
from walog.testing import LocalCluster


def _fill_two_hours_apart(cluster: LocalCluster, name: str) -> float:
    """Records a, b, c stamped two hours ago, then d, e stamped now; return a's time."""
    with walog.connect(cluster.metadata_uri) as client:
        log = client.open_log(name)
        with log.open_writer() as writer:
            then = time.time() - 7200
            writer.async_writer._clock = lambda: then
            for record in (b"a", b"b", b"c"):
                writer.append(record)
        with log.open_writer() as writer:
            for record in (b"d", b"e"):
                writer.append(record)
    return then


def test_tail_since_starts_at_the_first_record_stamped_at_or_after_the_time(
    cluster: LocalCluster,
    log_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", cluster.metadata_uri)
    then = _fill_two_hours_apart(cluster, log_name)
    for since, expected in (("1h", "de"), ("3h", "abcde"), ("30m", "de"), ("1d", "abcde")):
        status, out, err = _run(
            ["tail", log_name, "--since", since, "--idle-timeout", "0.5"], capsys
        )
        assert status == 0, err
        assert "".join(line.split("\t")[1] for line in out.splitlines()) == expected, since
    iso = datetime.datetime.fromtimestamp(then, datetime.UTC).isoformat()
    status, out, err = _run(["tail", log_name, "--since", iso, "--idle-timeout", "0.5"], capsys)
    assert status == 0, err
    assert len(out.splitlines()) == 5


@pytest.mark.parametrize(
    ("since", "message"),
    [
        ("10x", "neither an age nor a time"),
        ("ten minutes", "neither an age nor a time"),
        ("2026-01-01T00:00:00", "has no time zone"),
    ],
)
def test_tail_since_refuses_what_is_not_an_age_or_a_zoned_time_in_one_line(
    since: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _run(["tail", "some-log", "--since", since], capsys)
    assert status == 2
    assert message in err and "such as 90s, 10m, 2h or 7d" in err
    assert len(err.strip().splitlines()) == 1 and not out


def test_tail_since_takes_no_other_start(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(["tail", "some-log", "--since", "1h", "-n", "3"], capsys)
    assert status == 2 and "leave out -n and --from" in err


def test_an_age_counts_back_from_now_and_an_iso_time_keeps_its_zone() -> None:
    assert parse_since("90s", 1000.0) == 910.0
    assert parse_since("1.5h", 10_000.0) == 10_000.0 - 5400.0
    assert parse_since("2d", 200_000.0) == 200_000.0 - 172_800.0
    assert parse_since("1970-01-01T01:00:00+01:00", 0.0) == 0.0
    assert parse_since("1970-01-01T00:00:10Z", 0.0) == 10.0

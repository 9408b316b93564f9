"""Bookie flags map 1:1 onto BookieConfig, validated with one clear message per problem."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bookie.config import BookieConfig, parse_listen
from bookie.main import build_parser, parse_config

BASE = ["--data-dir", "/d", "--listen", "127.0.0.1:3181", "--metadata", "sqlite:///m.db"]


def test_every_config_field_has_exactly_one_flag() -> None:
    flags = {a.dest for a in build_parser()._actions if a.dest not in ("help", "version")}
    fields = {field.name for field in dataclasses.fields(BookieConfig)}
    # --rebuild-index is a command; --config and --print-config say where settings come from.
    assert fields == flags - {"log_level", "rebuild_index", "config", "print_config"}


def test_flags_reach_the_config_and_the_storage_settings() -> None:
    config, level = parse_config(
        [
            *BASE,
            "--journal-dir",
            "/j",
            "--group-wait-s",
            "0.0025",
            "--group-max-bytes",
            "4096",
            "--allow-format",
            "--log-level",
            "DEBUG",
        ]
    )
    assert config.bookie_id == "127.0.0.1:3181"
    assert config.allow_format and level == "DEBUG"
    storage = config.storage_config()
    assert storage.journal_path == Path("/j")
    assert (storage.group_wait_s, storage.group_max_bytes) == (0.0025, 4096)


def test_group_commit_waits_for_nothing_by_default_and_accepts_zero() -> None:
    config, _ = parse_config(BASE)
    assert config.storage_config().group_wait_s == 0.0
    config, _ = parse_config([*BASE, "--group-wait-s", "0"])
    assert config.group_wait_s == 0.0


def test_exit_with_is_off_by_default_and_takes_a_process_id() -> None:
    assert parse_config(BASE)[0].exit_with is None
    assert parse_config([*BASE, "--exit-with", "4242"])[0].exit_with == 4242


def test_journal_defaults_to_a_directory_inside_the_data_dir() -> None:
    config, _ = parse_config(BASE)
    assert config.journal_path == Path("/d/journal")


@pytest.mark.parametrize(
    ("listen", "problem"),
    [("nohost", "HOST:PORT"), (":3181", "HOST:PORT"), ("h:0", "1..65535"), ("h:x", "HOST:PORT")],
)
def test_listen_must_be_host_and_a_real_port(listen: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_listen(listen)


def test_ipv6_listen_address_is_accepted() -> None:
    assert parse_listen("[::1]:3181") == ("::1", 3181)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"tls_cert": Path("c")}, "--tls-cert and --tls-key"),
        ({"tls_ca": Path("ca")}, "--tls-ca needs"),
        ({"metadata": "mysql://x"}, "--metadata"),
        ({"group_wait_s": -1}, "--group-wait-s must be >= 0"),
        ({"volatile_flush_interval_s": 0.5}, "--volatile-flush-interval-s must be >= 1"),
        ({"max_inflight_bytes": 10}, "--max-inflight-bytes must be at least"),
        ({"gc_stray_interval_s": -1}, "--gc-stray-interval-s must be >= 0"),
        ({"gc_stray_grace_s": -5}, "--gc-stray-grace-s must be >= 0"),
        ({"exit_with": 0}, "--exit-with must be a process id > 0"),
        ({"exit_with": -7}, "--exit-with must be a process id > 0"),
    ],
)
def test_bad_settings_name_the_flag(changes: dict[str, object], problem: str) -> None:
    settings: dict[str, object] = {
        "data_dir": Path("/d"),
        "listen": "h:1",
        "metadata": "sqlite:///m.db",
        **changes,
    }
    with pytest.raises(ValueError, match=problem):
        BookieConfig(**settings)  # type: ignore[arg-type]


def _config(**changes: object) -> BookieConfig:
    base: dict[str, object] = {
        "data_dir": Path("/d"),
        "listen": "h:1",
        "metadata": "sqlite:///m.db",
    }
    return BookieConfig(**base, **changes)  # type: ignore[arg-type]


def test_the_native_unix_socket_defaults_to_the_data_dir() -> None:
    assert _config().native_socket_path == Path("/d/native.sock")
    assert _config(native_socket="/run/b.sock").native_socket_path == Path("/run/b.sock")


def test_there_is_no_native_unix_socket_when_off_with_tls_or_without_native_port() -> None:
    assert _config(native_socket="off").native_socket_path is None
    assert _config(native_port=-1).native_socket_path is None
    assert _config(tls_cert=Path("c"), tls_key=Path("k")).native_socket_path is None


def test_sizes_take_units_and_show_them_in_the_help() -> None:
    config, _ = parse_config([*BASE, "--max-entry-bytes", "2MiB", "--group-max-bytes", "64K"])
    assert (config.max_entry_bytes, config.group_max_bytes) == (2 * 1024 * 1024, 64_000)
    help_text = build_parser().format_help()
    assert "[512 KiB]" in help_text  # --group-max-bytes' default, for people
    for group in ("storage:", "journal:", "network:", "security:", "maintenance:"):
        assert group in help_text
    assert "discards what it stored" in help_text  # --allow-format says what it costs


def test_bad_flags_are_one_line_naming_the_program_it_was_started_as(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_config([*BASE, "--log-level", "LOUD"], prog="python -m bookie")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m bookie: error: ")
    assert "invalid choice: 'LOUD'" in err
    with pytest.raises(SystemExit):
        parse_config([*BASE, "--max-entry-bytes", "lots"])
    assert "'lots' is not a size" in capsys.readouterr().err


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("walog bookie ")

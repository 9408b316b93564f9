"""One convention for every ``walog`` command, delegated ones included, checked by walking
the parser tree: help text on every argument, one-line usage errors with exit status 2,
``--metadata`` (default from WALOG_METADATA) and ``--timeout`` wherever a command reaches a
cluster, and a log always named by the positional ``log``."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator

import pytest

from walog import main as cli
from walog.cli.options import ENV_METADATA

# Delegated commands parse their own arguments: their parsers, by command words.
DELEGATED = {
    ("bookie",): "bookie.main",
    ("bookie", "decommission"): "walog.autorecovery.decommission",
    ("bench",): "walog.bench.command",
    ("archive",): "walog.spark.archive_command",
    ("autorecovery",): "walog.autorecovery.command",
    ("maintain",): "walog.maintenance.command",
    ("status",): "walog.cli.status",
}
# Commands that start a cluster of their own take no --metadata and no --timeout.
OWN_CLUSTER = {("quickstart",), ("bench",)}
# The bookie is a server: its metadata store has --metadata-timeout-s, not --timeout.
NO_TIMEOUT = {("bookie",)}
# The bookie is a server whose output is its log: it prints no result to put in JSON.
NO_JSON = {("bookie",)}
# What each command needs before a bad flag is the only problem left.
POSITIONALS = {
    ("append",): ["a-log", "a-record"],
    ("tail",): ["a-log"],
    ("ledger", "show"): ["1"],
    ("log", "show"): ["a-log"],
    ("log", "create"): ["a-log"],
    ("log", "config"): ["a-log"],
    ("log", "cursors"): ["a-log"],
    ("log", "repair"): ["a-log"],
    ("truncate",): ["a-log", "--before", "1:0:0"],
    ("recover",): ["1"],
    ("archive",): ["a-log", "--to", "/tmp/a-dir"],
    ("bookie", "decommission"): ["127.0.0.1:3181"],
}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands() -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command's own parser, by its words."""

    def walk(
        words: tuple[str, ...], parser: argparse.ArgumentParser
    ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
        children = _subparsers(parser)
        if words in DELEGATED:
            module = importlib.import_module(DELEGATED[words])
            yield words, module.build_parser()
        elif not children:
            yield words, parser
        for name, child in children.items():
            yield from walk((*words, name), child)

    yield from walk((), cli.build_parser())
    yield (
        ("bookie", "decommission"),
        importlib.import_module(DELEGATED[("bookie", "decommission")]).build_parser(),
    )


ALL = dict(commands())


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in parser._actions for flag in a.option_strings}


@pytest.mark.parametrize("words", sorted(ALL), ids=" ".join)
def test_every_argument_has_help_text(words: tuple[str, ...]) -> None:
    parser = ALL[words]
    missing = [
        a.dest
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._VersionAction)
        and not isinstance(a, argparse._SubParsersAction)
        and not (a.help and a.help.strip())
    ]
    assert not missing, f"walog {' '.join(words)}: arguments without help: {missing}"


@pytest.mark.parametrize("words", sorted(ALL), ids=" ".join)
def test_a_usage_error_is_one_line_and_exit_status_2(
    words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        ALL[words].parse_args(["--no-such-flag"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": error: " in err, err


@pytest.mark.parametrize("words", sorted(set(ALL) - OWN_CLUSTER), ids=" ".join)
def test_a_command_that_reaches_a_cluster_takes_metadata_and_timeout(
    words: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = _options(ALL[words])
    assert "--metadata" in options, f"walog {' '.join(words)} has no --metadata"
    if words not in NO_TIMEOUT:
        assert "--timeout" in options, f"walog {' '.join(words)} has no --timeout"


def test_metadata_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_METADATA, "sqlite:///from/env.db")
    for words, parser in commands():
        if words in OWN_CLUSTER or words == ("bookie",):
            continue  # the bookie reads the variable when it resolves its settings
        action = _options(parser).get("--metadata")
        assert action is not None and action.default == "sqlite:///from/env.db", words


def test_a_log_is_always_the_positional_log() -> None:
    for words, parser in ALL.items():
        options = _options(parser)
        assert "--log" not in options, f"walog {' '.join(words)} names its log with --log"
        for action in parser._actions:
            if not action.option_strings and "log" in (action.dest, str(action.metavar).lower()):
                assert action.dest == "log" and action.metavar in (None, "LOG"), words


def test_password_protected_logs_take_a_password_file() -> None:
    for words in (("append",), ("tail",), ("truncate",), ("recover",)):
        assert "--password-file" in _options(ALL[words]), words


@pytest.mark.parametrize("words", sorted(set(ALL) - NO_JSON), ids=" ".join)
def test_every_command_prints_json_when_asked(words: tuple[str, ...]) -> None:
    assert "--json" in _options(ALL[words]), f"walog {' '.join(words)} has no --json"


@pytest.mark.parametrize("words", sorted(ALL), ids=" ".join)
def test_a_bad_flag_is_a_usage_error_of_the_command_it_was_given_to(
    words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*words, *POSITIONALS.get(words, []), "--no-such-flag"]
    try:
        status = cli.main(argv)
    except SystemExit as exc:
        status = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert status == 2, (argv, err)
    assert err.count("\n") == 1 and "unrecognized arguments: --no-such-flag" in err, err
    if words != ("bookie",):  # the bookie's own program names itself
        assert f"see 'walog {' '.join(words)} --help'" in err, err


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["truncate", "a-log", "--before", "garbage"], "--before 'garbage'"),
        (["tail", "a-log", "--from", "garbage"], "--from 'garbage'"),
        (["tail", "a-log", "-n", "2", "--from", "earliest"], "leave out --from"),
        (["tail", "a-log", "-n", "0"], "-n must be at least 1"),
    ],
)
def test_a_bad_value_is_a_usage_error_with_exit_status_2(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main([*argv, "--metadata", "sqlite:///nowhere/at/all.db"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and names in err, err


def test_quickstart_help_lists_only_the_flags_it_uses() -> None:
    assert sorted(_options(ALL[("quickstart",)])) == ["--help", "--json", "-h"]


def test_walog_help_names_bookie_decommission(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "walog bookie decommission" in capsys.readouterr().out


def test_append_takes_options_between_its_log_and_its_records() -> None:
    args = cli.build_parser().parse_args(["append", "a-log", "--take-over", "one", "two"])
    assert args.take_over and args.records == ["one", "two"]
    args = cli.build_parser().parse_args(["append", "a-log", "one", "--json", "two"])
    assert args.json and args.records == ["one", "two"]

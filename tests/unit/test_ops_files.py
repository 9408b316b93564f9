"""The files shipped for operators: every query of the Grafana dashboard is valid PromQL
over metric names walog exports (promtool parses them; the names are checked here); the
example configuration files are read by the programs' own loader, name only real keys and
are what the flags generate; the systemd units pass ``systemd-analyze verify`` and start
the programs with flags they have."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import bookie.main
import walog.autorecovery.command
from walog.config_file import ENV_METADATA

OPS = Path(__file__).resolve().parents[2] / "docs" / "ops"
DOCS = OPS.parent / "operations.md"


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((OPS / "walog-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_every_dashboard_query_parses_as_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: apt-get install -y prometheus (./test does this)")
    # promtool parses the expressions of recording rules: one rule per query.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"walog:q{i}", "expr": q} for i, q in enumerate(_dashboard_queries())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_and_alerts_use_only_documented_metrics() -> None:
    documented = DOCS.read_text()
    texts = [*_dashboard_queries(), (OPS / "walog-alerts.yml").read_text()]
    names = {n for text in texts for n in re.findall(r"\bwalog_[a-z_]+", text)}
    assert names
    for name in sorted(names):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        short = re.sub(r"^walog_(bookie|client|autorecovery)_", "", base)
        assert f"`{short}" in documented or f"{short}`" in documented or base in documented, name


EXAMPLES = {
    "bookie.toml": (bookie.main, "bookie.main"),
    "autorecovery.toml": (walog.autorecovery.command, "walog.autorecovery.command"),
}


def _keys(parser: argparse.ArgumentParser) -> set[str]:
    """The keys a program's configuration file may have: its flags that are settings."""
    return {
        option[2:]
        for action in parser._actions
        for option in action.option_strings[:1]
        if option.startswith("--") and action.help is not argparse.SUPPRESS
    } - {"help", "version", "config", "print-config", "rebuild-index"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_an_example_configuration_file_names_only_real_keys_and_all_of_them(name: str) -> None:
    module, dotted = EXAMPLES[name]
    text = (OPS / name).read_text()
    assert text == module.example_config(), (
        f"docs/ops/{name} is not what the flags generate; regenerate it: python -c 'import "
        f'{dotted} as m; print(m.example_config(), end="")\' > docs/ops/{name}'
    )
    set_keys = set(tomllib.loads(text))
    hinted = set(re.findall(r"^# ([a-z][a-z0-9-]*) = ", text, re.MULTILINE))
    keys = _keys(module.build_parser())
    assert set_keys | hinted == keys and not set_keys & hinted
    # The commented-out examples are values the program takes too.
    uncommented = re.sub(r"^# ([a-z][a-z0-9-]*) = ", r"\1 = ", text, flags=re.MULTILINE)
    assert set(tomllib.loads(uncommented)) == keys


def test_the_example_bookie_toml_is_a_configuration_the_bookie_accepts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, level = bookie.main.parse_config(["--config", str(OPS / "bookie.toml")], environ={})
    assert config.listen == "bookie1.example.com:3181" and level == "INFO"
    defaults, _ = bookie.main.parse_config(
        ["--data-dir", str(config.data_dir), "--listen", config.listen, "--metadata",
         config.metadata],
        environ={},
    )  # fmt: skip
    assert config == defaults  # every other key is the default


def test_the_example_autorecovery_toml_is_a_configuration_the_daemon_accepts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_METADATA, raising=False)
    config = str(OPS / "autorecovery.toml")
    assert walog.autorecovery.command.main(["--config", config, "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert 'metadata = "zk://zk1.example.com:2181' in printed and "# file" in printed


UNITS = {
    "walog-bookie.service": ("bookie", bookie.main.build_parser, "/etc/walog/bookie.toml"),
    "walog-autorecovery.service": (
        "autorecovery",
        walog.autorecovery.command.build_parser,
        "/etc/walog/autorecovery.toml",
    ),
}


def _exec_start(unit: str) -> list[str]:
    lines = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1
    return lines[0].removeprefix("ExecStart=").split()


@pytest.mark.parametrize("name", sorted(UNITS))
def test_a_systemd_unit_starts_its_program_from_its_configuration_file(name: str) -> None:
    command, build_parser, config = UNITS[name]
    argv = _exec_start((OPS / name).read_text())
    assert argv[1] == command
    parser = build_parser()
    for action in parser._actions:
        action.required = False  # the file gives them
    args, unknown = parser.parse_known_args(argv[2:])
    assert not unknown and str(args.config) == config


def test_the_maintenance_unit_says_it_needs_the_walog_maintain_command() -> None:
    unit = (OPS / "walog-maintain.service").read_text()
    assert _exec_start(unit)[1:3] == ["maintain", "--config"]
    assert "NEEDS `walog maintain`" in unit
    assert "needs the walog maintain command" in unit  # in its Description, for systemctl


@pytest.mark.parametrize("name", [*sorted(UNITS), "walog-maintain.service"])
def test_a_systemd_unit_passes_systemd_analyze_verify(name: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze not found: apt-get install -y systemd (./test does this)")
    unit = (OPS / name).read_text()
    # verify checks that the command exists: this interpreter stands in for the walog script.
    (tmp_path / name).write_text(unit.replace("/opt/walog/bin/walog", sys.executable))
    done = subprocess.run(
        [analyze, "verify", str(tmp_path / name)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stdout + done.stderr

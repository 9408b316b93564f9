"""One home per bookie setting, and the bookie's TOML file: settings of the storage engine,
compaction and disk thresholds reach the flags with their own name, unit, default and help;
``--config`` reads the same keys; flags win over the environment, which wins over the file;
``--print-config`` names each value's source; a bad file is one line naming file and key."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from bookie.config import BookieConfig
from bookie.disks import DiskThresholds
from bookie.main import build_parser, main, parse_config
from bookie.storage.compaction import CompactionPolicy
from bookie.storage.config import StorageConfig
from walog.config import ClientConfig
from walog.log.log_config import LogConfig
from walog.log.writer import LogWriterConfig
from walog.settings import HELP, OWNER
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES

BASE = ["--data-dir", "/d", "--listen", "127.0.0.1:3181", "--metadata", "sqlite:///m.db"]
REQUIRED = 'data-dir = "/d"\nlisten = "127.0.0.1:3181"\nmetadata = "sqlite:///m.db"\n'
NO_ENV: dict[str, str] = {}


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bookie.toml"
    path.write_text(text)
    return path


def _printed(argv: list[str], capsys: pytest.CaptureFixture[str], env: dict[str, str]) -> dict:
    """The lines of ``--print-config``: source of each key (None for a key not set)."""
    with pytest.raises(SystemExit) as exited:
        parse_config([*argv, "--print-config"], environ=env)
    assert exited.value.code == 0
    sources: dict[str, str] = {}
    for line in capsys.readouterr().out.splitlines():
        if line and not line.startswith("# "):
            assignment, source = line.split("  # ")
            sources[assignment.split(" = ")[0]] = source
    return sources


def test_a_bookie_a_client_and_a_log_share_one_default_entry_limit() -> None:
    config, _ = parse_config(BASE, environ=NO_ENV)
    client_largest = ClientConfig().max_entry_bytes
    assert client_largest == DEFAULT_MAX_ENTRY_BYTES
    assert config.max_entry_bytes == client_largest == LogConfig().max_entry_bytes
    assert LogWriterConfig().max_entry_bytes == DEFAULT_MAX_ENTRY_BYTES
    assert config.storage_config().max_entry_bytes == StorageConfig(Path("/d")).max_entry_bytes


def test_no_setting_changes_its_name_or_unit_on_the_way_to_the_storage() -> None:
    config, _ = parse_config(
        [*BASE, "--group-wait-s", "0.25", "--checkpoint-interval-s", "7",
         "--minor-compaction-interval-s", "30", "--disk-usage-threshold", "0.97"],
        environ=NO_ENV,
    )  # fmt: skip
    storage = config.storage_config()
    owners = {StorageConfig: storage, CompactionPolicy: storage.compaction}
    owners[DiskThresholds] = config.disk_thresholds()
    for field in dataclasses.fields(BookieConfig):
        owner = field.metadata.get(OWNER)
        if owner is not None:
            assert getattr(owners[owner], field.name) == getattr(config, field.name), field.name
    assert (storage.group_wait_s, storage.checkpoint_interval_s) == (0.25, 7.0)
    assert storage.compaction.minor_compaction_interval_s == 30.0


def test_derived_settings_take_the_default_and_help_of_their_owner() -> None:
    actions = {a.dest: a for a in build_parser()._actions if a.help != argparse.SUPPRESS}
    derived = [f for f in dataclasses.fields(BookieConfig) if OWNER in f.metadata]
    assert {f.metadata[OWNER] for f in derived} == {StorageConfig, CompactionPolicy, DiskThresholds}
    for field in derived:
        own = {f.name: f for f in dataclasses.fields(field.metadata[OWNER])}[field.name]
        assert field.default == own.default, field.name
        help_text = actions[field.name].help or ""
        assert help_text.startswith(own.metadata[HELP].replace("%", "%%")), field.name


def test_every_duration_and_size_has_its_unit_in_its_name() -> None:
    for field in dataclasses.fields(BookieConfig):
        help_text = field.metadata[HELP]
        if field.type in ("float", "float | None") and "threshold" not in field.name:
            assert field.name.endswith("_s"), field.name
        assert "seconds" not in help_text or field.name.endswith("_s"), field.name
    sizes = [f.name for f in dataclasses.fields(BookieConfig) if f.name.endswith("_bytes")]
    assert {"max_entry_bytes", "group_max_bytes", "compaction_rate_bytes"} <= set(sizes)


def test_old_flag_spellings_still_work_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = parse_config(
        [*BASE, "--group-wait-ms", "2", "--checkpoint-interval", "3", "--gc-grace", "4"],
        environ=NO_ENV,
    )
    assert (config.group_wait_s, config.checkpoint_interval_s, config.gc_grace_s) == (
        0.002,
        3.0,
        4.0,
    )
    err = capsys.readouterr().err
    assert "--group-wait-ms is deprecated; use --group-wait-s" in err
    assert "--checkpoint-interval is deprecated; use --checkpoint-interval-s" in err
    assert "--group-wait-ms" not in build_parser().format_help()


def test_a_bookie_takes_every_setting_from_its_file_alone(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        REQUIRED + 'group-wait-s = 0.002\nmax-entry-bytes = "2MiB"\ngroup-max-bytes = 4096\n'
        'allow-format = true\njournal-dir = "/j"\nlog-level = "DEBUG"\n'
        "minor-compaction-threshold = 0.1\n",
    )
    config, level = parse_config(["--config", str(path)], environ=NO_ENV)
    assert (config.data_dir, config.listen, config.metadata) == (
        Path("/d"),
        "127.0.0.1:3181",
        "sqlite:///m.db",
    )
    assert config.group_wait_s == 0.002 and config.max_entry_bytes == 2 * 1024 * 1024
    assert config.group_max_bytes == 4096 and config.allow_format and level == "DEBUG"
    assert config.journal_path == Path("/j")
    assert config.compaction_policy().minor_compaction_threshold == 0.1


def test_a_flag_overrides_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, REQUIRED + 'gc-interval-s = 30\nrack = "r1"\n')
    config, _ = parse_config(
        ["--config", str(path), "--gc-interval-s", "5", "--listen", "127.0.0.1:4000"],
        environ=NO_ENV,
    )
    assert (config.gc_interval_s, config.listen, config.rack) == (5.0, "127.0.0.1:4000", "r1")


def test_print_config_names_the_source_of_each_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, 'data-dir = "/d"\nlisten = "h:1"\nmetadata = "sqlite:///f.db"\n'
                 "gc-interval-s = 30\nrack = \"r1\"\n")  # fmt: skip
    env = {"WALOG_METADATA": "sqlite:///env.db"}
    sources = _printed(["--config", str(path), "--rack", "r2"], capsys, env)
    assert sources["data-dir"] == "file" and sources["gc-interval-s"] == "file"
    assert sources["rack"] == "flag"  # the flag wins over the file
    assert sources["metadata"] == "environment WALOG_METADATA"  # the variable too
    assert sources["group-wait-s"] == "default" and sources["log-level"] == "default"
    assert set(sources) <= {a.option_strings[0][2:] for a in build_parser()._actions}
    sources = _printed([*BASE, "--config", str(path)], capsys, env)
    assert sources["metadata"] == "flag"


def test_the_printed_settings_are_a_file_the_bookie_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_config([*BASE, "--gc-grace-s", "12", "--print-config"], environ=NO_ENV)
    path = _file(tmp_path, capsys.readouterr().out)
    config, _ = parse_config(["--config", str(path)], environ=NO_ENV)
    assert config == parse_config([*BASE, "--gc-grace-s", "12"], environ=NO_ENV)[0]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (REQUIRED + "gc-interval = 3\n",
         "unknown key 'gc-interval' (--gc-interval is deprecated: the key is 'gc-interval-s')"),
        (REQUIRED + "group_wait_s = 0\n",
         "unknown key 'group_wait_s' (keys are spelled like the flags: 'group-wait-s')"),
        (REQUIRED + "no-such-key = 1\n", "unknown key 'no-such-key'"),
        (REQUIRED + 'gc-grace-s = "soon"\n', "key 'gc-grace-s': expected a number, got a string"),
        (REQUIRED + "allow-format = 1\n",
         "key 'allow-format': expected true or false, got an integer"),
        (REQUIRED + 'max-entry-bytes = "lots"\n', "key 'max-entry-bytes': 'lots' is not a size"),
        (REQUIRED + 'log-level = "LOUD"\n', "key 'log-level': expected one of"),
        (REQUIRED + "group-wait-s = -1\n",
         "--group-wait-s must be >= 0, got -1.0 (key 'group-wait-s' of {path})"),
        (REQUIRED + "disk-usage-lwm-threshold = 0.99\n",
         "(key 'disk-usage-lwm-threshold' of {path})"),
        ('data-dir = "/d"\n', "missing settings: --listen, --metadata (flags, or keys of {path})"),
        ("data-dir = \n", "{path}: not a TOML file: "),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_in_one_line_naming_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(SystemExit) as exited:
        parse_config(["--config", str(path)], prog="python -m bookie", environ=NO_ENV)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m bookie: error: "), err
    assert problem.format(path=path) in err, err
    assert str(path) in err


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_config(["--config", str(tmp_path / "none.toml")], environ=NO_ENV)
    assert exited.value.code == 2
    assert (
        f"--config {tmp_path / 'none.toml'}: No such file or directory" in capsys.readouterr().err
    )


def test_the_metadata_store_may_come_from_the_environment() -> None:
    env = {"WALOG_METADATA": "sqlite:///env.db"}
    config, _ = parse_config(["--data-dir", "/d", "--listen", "h:1"], environ=env)
    assert config.metadata == "sqlite:///env.db"


def test_the_flag_table_of_the_docs_names_every_flag_with_its_default() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "bookies.md").read_text()
    documented: dict[str, str] = {}
    for line in docs.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`--"):
            for flag in re.findall(r"`(--[a-z-]+)", cells[0]):
                documented[flag] = cells[1]
    actions = {
        a.option_strings[0]: a
        for a in build_parser()._actions
        if a.option_strings[0].startswith("--") and a.help != argparse.SUPPRESS
    }
    assert set(documented) == set(actions) - {"--help", "--version"}
    for flag, default in documented.items():
        number = re.match(r"^(-?\d+(?:\.\d+)?)\b", default)
        if number is not None:
            assert float(number.group(1)) == actions[flag].default, flag
        assert (default == "required") == actions[flag].required, flag


def test_rebuild_index_takes_the_data_dir_from_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    path = _file(tmp_path, REQUIRED.replace('"/d"', f'"{data_dir}"'))
    assert main(["--config", str(path), "--rebuild-index"], prog="python -m bookie") == 1
    # An empty data directory has no entry logs to rebuild from: the file's one was used.
    assert f"rebuilding the index of {data_dir} failed" in capsys.readouterr().err
